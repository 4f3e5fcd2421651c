"""Client settings: connection settings pass through unchanged; secrets never printed.

Every client onceflow opens (producer, consumer, admin, the kafka-python
connection of ``txn_protocol``) starts from the same user config: bootstrap
servers, ``security.protocol``, ``sasl.*``, ``ssl.*`` are copied as given.
onceflow adds the settings its protocol depends on and refuses user
settings that would break it, naming the setting and the fix. Two defaults
it adds only for the embedded brokers' and librdkafka's sake
(``receive.message.max.bytes``, ``enable.sparse.connections``) give way to a
user's own setting.
"""

from __future__ import annotations

from typing import Any, Mapping

from onceflow.config.settings import ConfigurationError
from onceflow.config.kafka_cluster import REDACTED, KafkaCluster, check_sasl_mechanism, is_secret, redact  # noqa: F401  (redaction lives with the settings it guards)



def base_config(source: KafkaCluster | Mapping[str, Any]) -> dict[str, Any]:
    """The user's librdkafka settings, from a KafkaCluster or a plain dict."""
    config = source.config() if isinstance(source, KafkaCluster) else dict(source)
    if not config.get("bootstrap.servers"):
        raise ConfigurationError("Kafka config has no bootstrap.servers: set it to your cluster's host:port list")
    return config


def _refuse(config: Mapping[str, Any], key: str, allowed: set[str], why: str) -> None:
    value = config.get(key)
    if value is not None and str(value).lower() not in allowed:
        raise ConfigurationError(f"Kafka setting {key}={value!r} breaks exactly-once ({why}): remove it")


# Settings of every librdkafka client onceflow opens that a user's own setting overrides.
CLIENT_DEFAULTS: dict[str, Any] = {
    # With sparse connections (librdkafka's default) a client drops the bootstrap connection
    # once it learns the broker ids, and waits out a reconnect backoff before it connects to
    # one again: init_transactions 53 ms, sometimes 510 ms (its coordinator timer), a
    # consumer's first metadata or fetch 53 ms, an admin client's 56 ms (measured; 2-5 ms
    # without). Every split, fence, repair, range read, commit verification and task's
    # connection check opens a client.
    "enable.sparse.connections": False,
}


def client_config(source: KafkaCluster | Mapping[str, Any]) -> dict[str, Any]:
    """The user's settings with ``CLIENT_DEFAULTS`` where the user set none: every librdkafka client's
    (an admin client's as it is; consumers and producers add their own)."""
    config = base_config(source)
    for key, value in CLIENT_DEFAULTS.items():
        config.setdefault(key, value)
    return config
# Producer settings a user's own setting overrides.
PRODUCER_DEFAULTS: dict[str, Any] = {
    **CLIENT_DEFAULTS,
    # librdkafka's producer asks the broker to create a topic it looks up; a
    # mistyped sink topic must be an error, never a new topic holding the output.
    "allow.auto.create.topics": False,
}


def producer_config(source: KafkaCluster | Mapping[str, Any], txn_id: str, **overrides: Any) -> dict[str, Any]:
    """A transactional producer on ``txn_id`` (which onceflow derives: ids.py)."""
    config = base_config(source)
    if "transactional.id" in config:
        raise ConfigurationError(
            "Kafka config sets transactional.id: remove it, onceflow derives one per (pipeline, sink, split)"
        )
    _refuse(config, "enable.idempotence", {"true", "1"}, "transactions need the idempotent producer")
    _refuse(config, "acks", {"all", "-1"}, "transactions need acks=all")
    config.update({"transactional.id": txn_id, "enable.idempotence": True})
    return _with_defaults(config, overrides)


def direct_producer_config(source: KafkaCluster | Mapping[str, Any], acks_all: bool, **overrides: Any) -> dict[str, Any]:
    """A producer without a transaction, for outputs of the weaker guarantees: ``acks_all``
    (at_least_once) waits for every in-sync replica, idempotent; otherwise (none) for the leader,
    and never sends a record again (a retry after a lost acknowledgement would write it twice)."""
    config = base_config(source)
    if "transactional.id" in config:
        raise ConfigurationError("Kafka config sets transactional.id: remove it, onceflow sets it where it is needed")
    config.update({"enable.idempotence": True, "acks": "all"} if acks_all else
                  {"enable.idempotence": False, "acks": "1", "retries": 0})
    return _with_defaults(config, overrides)


def _with_defaults(config: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in PRODUCER_DEFAULTS.items():
        config.setdefault(key, value)
    config.update(overrides)
    return config


# librdkafka's upper bound for one broker answer. A consumer that gets a larger
# answer drops it and fetches again, forever: no records, no offsets. noida-db
# ignores fetch.max.bytes and max.partition.fetch.bytes and answers with every
# assigned partition read to its end (measured: 140 MB for 16 partitions of a
# 950,000-record topic, over the 100 MB default), so planning and commit
# verification stalled on large batches. Brokers that honour fetch.max.bytes
# never come near it; a user's own setting wins.
RECEIVE_MESSAGE_MAX_BYTES = 2_147_483_647


# librdkafka's consumer needs a group id, and looks up the group's coordinator even when it only assign()s
# (FindCoordinator: DESCRIBE on the group, an ACL like any other). Every onceflow consumer that reads by
# assign() carries this one and never commits to it. The dot keeps it apart from pipelines' own groups.
ASSIGN_ONLY_GROUP = "onceflow.readers"


def consumer_config(source: KafkaCluster | Mapping[str, Any], group_id: str = ASSIGN_ONLY_GROUP,
                    **overrides: Any) -> dict[str, Any]:
    """A read_committed consumer that never commits offsets on its own (of ``group_id``: the pipeline's
    consumer group where offsets are mirrored, else the group of assign()-only readers)."""
    config = client_config(source)
    _refuse(config, "isolation.level", {"read_committed"}, "read_uncommitted would show open and aborted transactions")
    config.setdefault("receive.message.max.bytes", RECEIVE_MESSAGE_MAX_BYTES)
    config.update(
        {
            "group.id": group_id,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    config.update(overrides)
    return config


def principal(config: Mapping[str, Any]) -> str:
    """Who the cluster takes this client for, as its ACLs name it (as far as the settings tell)."""
    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    mechanism = str(config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI").upper()
    if protocol.startswith("SASL") and config.get("sasl.username") and mechanism != "GSSAPI":
        return f"User:{config['sasl.username']}"
    if protocol.startswith("SASL"):
        return "this client's Kerberos principal"
    if protocol == "SSL":
        return "the principal of this client's TLS certificate"
    return "User:ANONYMOUS"


# librdkafka setting -> kafka-python setting, for the connection of txn_protocol.
_KAFKA_PYTHON_KEYS = {
    "bootstrap.servers": "bootstrap_servers",
    "client.id": "client_id",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
}
# Connection settings kafka-python cannot honour: refusing beats connecting differently.
_UNSUPPORTED_PREFIXES = ("ssl.keystore.", "ssl.certificate.pem", "ssl.key.pem", "ssl.ca.pem", "sasl.oauthbearer.")


def kafka_python_config(source: KafkaCluster | Mapping[str, Any]) -> dict[str, Any]:
    """The same connection, for kafka-python (used only for FindCoordinator/EndTxn)."""
    config = base_config(source)
    check_sasl_mechanism(config)
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in _KAFKA_PYTHON_KEYS:
            out[_KAFKA_PYTHON_KEYS[key]] = value
        elif key.startswith(_UNSUPPORTED_PREFIXES):
            raise ConfigurationError(
                f"Kafka setting {key} is not supported by onceflow's EndTxn client (kafka-python): "
                "use the file-based equivalent (ssl.*.location) or SASL PLAIN/SCRAM"
            )
    if str(config.get("enable.ssl.certificate.verification", "true")).lower() == "false":
        out["ssl_check_hostname"] = False
    if "security_protocol" in out:
        out["security_protocol"] = str(out["security_protocol"]).upper()
    if "sasl_mechanism" in out:
        out["sasl_mechanism"] = str(out["sasl_mechanism"]).upper()
    return out
