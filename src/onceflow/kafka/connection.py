"""Is the cluster willing to talk to us? Asked once where a task begins, answered at once.

A wrong password, an untrusted certificate or a mechanism the brokers do not offer never makes a
librdkafka call fail: the client reconnects and every call waits out its timeout, then reports a
"broker transport failure" that names none of it (kafka-python's bootstrap does the same). So each
process that starts protocol work (the plan, commit and rollback tasks; the Spark driver) first asks
for metadata on one admin client and reads what its error callback says meanwhile: a refusal is a
``ConnectionRefused`` naming the setting to fix, in about the time a handshake takes.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from onceflow.config.settings import ConfigurationError
from onceflow.kafka.config import base_config, principal

# How long each metadata request waits before the error callback is read again.
ASK_EVERY_S = 0.25
# librdkafka's words for a TLS handshake the client refused (it reports them as a transport error).
UNTRUSTED_CERTIFICATE = "certificate verify failed"


class ConnectionRefused(ConfigurationError):
    """The cluster refused this client's credentials or certificate; the message names the setting."""


class NoBrokerAnswered(RuntimeError):
    """No broker answered in time (down, restarting, or another protocol on that port)."""


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


def check_connection(config: Mapping[str, Any], timeout_s: float = 30.0) -> None:
    """Return once the cluster answers a metadata request; raise ``ConnectionRefused`` as soon as it
    refuses the credentials or the client refuses its certificate; ``NoBrokerAnswered`` after
    ``timeout_s`` without an answer."""
    settings = base_config(config)
    errors: list[KafkaError] = []
    try:
        admin = AdminClient({**{k: v for k, v in settings.items() if not callable(v)}, "error_cb": errors.append,
                             "log_level": 0})  # the refusal is raised here: librdkafka's own lines would repeat it
    except KafkaException as exc:  # a setting librdkafka cannot use (a missing CA file, a bad mechanism)
        raise ConnectionRefused(f"Kafka client settings refused: {exc.args[0].str()}: fix the Kafka connection") from None
    deadline = time.monotonic() + timeout_s
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
            raise NoBrokerAnswered(
                f"no broker of {settings['bootstrap.servers']} answered within {timeout_s:.0f} s "
                f"({errors[-1].str() if errors else 'no error reported'}): check bootstrap.servers and that "
                f"security.protocol={settings.get('security.protocol', 'PLAINTEXT')} is what that listener speaks")
