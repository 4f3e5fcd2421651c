"""Topic administration the demo, tests and tooling need (not the protocol)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic, ConfigResource

from onceflow.kafka.config import client_config


def _admin(config: Mapping[str, Any]) -> AdminClient:
    return AdminClient(client_config(config))


def ensure_topics(config: Mapping[str, Any], names: Iterable[str], partitions: int = 2, timeout_s: float = 30.0,
                  replication_factor: int = 1) -> list[str]:
    """Create the topics that do not exist yet (``replication_factor`` -1: the brokers'
    default.replication.factor); returns the ones created. Idempotent."""
    admin = _admin(config)
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    wanted = [n for n in dict.fromkeys(names) if n not in existing]
    if not wanted:
        return []
    futures = admin.create_topics([NewTopic(n, partitions, replication_factor) for n in wanted], operation_timeout=timeout_s)
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout_s)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return created


def delete_topics(config: Mapping[str, Any], names: Iterable[str], timeout_s: float = 30.0) -> None:
    """Delete the topics that exist (benchmarks drop what they made). Idempotent."""
    admin = _admin(config)
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    doomed = [n for n in dict.fromkeys(names) if n in existing]
    if doomed:
        for future in admin.delete_topics(doomed, operation_timeout=timeout_s).values():
            future.result(timeout_s)


def broker_setting(config: Mapping[str, Any], name: str, timeout_s: float = 30.0) -> str | None:
    """One broker's value of ``name`` (DescribeConfigs), or None when the broker reports none."""
    admin = _admin(config)
    broker = next(iter(admin.list_topics(timeout=timeout_s).brokers))
    return _described(admin, ConfigResource(ConfigResource.Type.BROKER, str(broker)), name, timeout_s)


def topic_setting(config: Mapping[str, Any], topic: str, name: str, timeout_s: float = 30.0) -> str | None:
    """The topic's value of ``name`` (DescribeConfigs), or None when the broker reports none."""
    return _described(_admin(config), ConfigResource(ConfigResource.Type.TOPIC, topic), name, timeout_s)


def _described(admin: AdminClient, resource, name: str, timeout_s: float) -> str | None:
    (future,) = admin.describe_configs([resource], request_timeout=timeout_s).values()
    entry = future.result(timeout=timeout_s).get(name)
    return None if entry is None or entry.value is None else str(entry.value)
