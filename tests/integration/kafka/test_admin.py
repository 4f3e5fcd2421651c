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
