"""Is the cluster willing to talk to us? Asked once where a task begins, answered at once.

A wrong password, an untrusted certificate or a mechanism the brokers do not offer never makes a
librdkafka call fail: the client reconnects and every call waits out its timeout, then reports a
"broker transport failure" that names none of it (kafka-python's bootstrap does the same). So each
process that starts protocol work (the plan, commit and rollback tasks; the Spark driver) first asks
for metadata on one admin client and reads what its error callback says meanwhile: a refusal is a
``ConnectionRefused`` naming the setting to fix, in about the time a handshake takes. A cluster that
does not answer at all (down, restarting, paused) is no refusal: after ``wait_s`` the check returns,
and the calls that follow wait for it with their own timeouts, as they would without it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from onceflow.config.settings import ConfigurationError
from onceflow.kafka.config import client_config, principal

log = logging.getLogger(__name__)
# How long each metadata request waits before the error callback is read again.
ASK_EVERY_S = 0.25
# librdkafka's words for a TLS handshake the client refused (it reports them as a transport error).
UNTRUSTED_CERTIFICATE = "certificate verify failed"


class ConnectionRefused(ConfigurationError):
    """The cluster refused this client's credentials or certificate; the message names the setting."""


def _refusal(config: Mapping[str, Any], error: KafkaError) -> str | None:
    """What to tell about ``error``, or None when it is no refusal (a broker still starting, say)."""
    said = error.str()
    where = f"Kafka at {config['bootstrap.servers']}"
    protocol = config.get("security.protocol", "PLAINTEXT")
    if error.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI"
        return (f"{where} refused to authenticate {principal(config)} ({mechanism} over {protocol}): {said}. "
                "Fix sasl.username / sasl.password (or sasl.mechanism) of the Kafka connection")
    if UNTRUSTED_CERTIFICATE in said:
        trusted = config.get("ssl.ca.location") or "the system's CA certificates (ssl.ca.location is not set)"
        return (f"{where}: the brokers' TLS certificate is not trusted: {said}. This client trusts {trusted}: set "
                "ssl.ca.location of the Kafka connection to the CA that signed the brokers' certificates")
    return None


def check_connection(config: Mapping[str, Any], wait_s: float = 5.0) -> None:
    """Return once the cluster answers a metadata request, or after ``wait_s`` without an answer; raise
    ``ConnectionRefused`` as soon as it refuses the credentials or the client refuses its certificate."""
    settings = client_config(config)
    errors: list[KafkaError] = []
    try:
        admin = AdminClient({**{k: v for k, v in settings.items() if not callable(v)}, "error_cb": errors.append,
                             "log_level": 0})  # the refusal is raised here: librdkafka's own lines would repeat it
    except KafkaException as exc:  # a setting librdkafka cannot use (a missing CA file, a bad mechanism)
        raise ConnectionRefused(f"Kafka client settings refused: {exc.args[0].str()}: fix the Kafka connection") from None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            admin.list_topics(timeout=ASK_EVERY_S)
            return
        except KafkaException:
            pass
        admin.poll(0)
        for error in errors:
            refusal = _refusal(settings, error)
            if refusal:
                raise ConnectionRefused(refusal)
        if time.monotonic() > deadline:
            log.info("Kafka at %s did not answer within %.0f s (%s); going on, its calls wait for it themselves",
                     settings["bootstrap.servers"], wait_s, errors[-1].str() if errors else "no error reported")
            return
