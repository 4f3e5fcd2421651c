"""Topic administration for the demo, tests and benchmarks."""

from __future__ import annotations

import time
import uuid

from confluent_kafka.admin import AdminClient

from onceflow.kafka.admin import delete_topics, ensure_topics


def _topics(config) -> set[str]:
    return set(AdminClient(dict(config)).list_topics(timeout=10).topics)


def test_topics_are_created_once_and_deleted_once(kafka_broker):
    config = kafka_broker.config()
    names = [f"admin-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    assert sorted(ensure_topics(config, names, partitions=1)) == sorted(names)
    assert ensure_topics(config, names, partitions=1) == []

    delete_topics(config, names + [f"never-made-{uuid.uuid4().hex[:8]}"])
    deadline = time.monotonic() + 30
    while set(names) & _topics(config) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(names) & _topics(config)
    delete_topics(config, names)  # gone already: nothing to do


def test_a_broker_setting_is_its_value_or_none_when_the_broker_reports_none(kafka_broker):
    from onceflow.kafka.admin import broker_setting

    value = broker_setting(kafka_broker.config(), "transaction.max.timeout.ms", timeout_s=10)
    assert value is None or value.isdigit(), value
    assert broker_setting(kafka_broker.config(), "no.such.setting", timeout_s=10) is None
