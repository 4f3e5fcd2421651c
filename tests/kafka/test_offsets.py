"""Planning against a real broker: ranges end at the last stable offset and
new partitions are picked up. The planning rules themselves (one planner,
protocol.planning) are unit-tested in tests/protocol/test_planning.py."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from onceflow.kafka.offsets import KafkaOffsetSource
from onceflow.protocol.plan import OffsetRange, SinkPlan
from onceflow.protocol.planning import PlanConfig, TopicPartition, next_plan
from onceflow.protocol.states import BatchState
from onceflow.services.kafka_broker import LSO_FROM_LIST_OFFSETS
from tests.kafka.helpers import create_topic, produce_txn
from tests.support import require


def plan(source, topic: str, max_records: int, previous=None):
    """The next plan after ``previous`` (taken as committed), as the plan task computes it."""
    config = PlanConfig(topics=(topic,), sinks=(SinkPlan("out", "files", 1),), max_records_per_partition=max_records)
    return next_plan(
        pipeline="p", previous=previous, previous_state=BatchState.COMMITTED if previous else None,
        source=source, config=config, now_ms=0,
    )


def test_plan_never_reaches_into_an_open_upstream_transaction(kafka_broker):
    require(kafka_broker, LSO_FROM_LIST_OFFSETS)
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="lso")
    produce_txn(config, topic, [b"c%d" % i for i in range(5)], 0, True)  # offsets 0-4, marker 5
    upstream = Producer({**config, "transactional.id": f"upstream-{topic}"})
    upstream.init_transactions(30)
    upstream.begin_transaction()
    for i in range(3):
        upstream.produce(topic, b"open%d" % i, partition=0)
    upstream.flush(30)
    try:
        with KafkaOffsetSource(config) as source:
            first = plan(source, topic, 1000)
            assert first.ranges == (OffsetRange(topic, 0, 0, 6),)
            assert plan(source, topic, 4).ranges == (OffsetRange(topic, 0, 0, 4),)
            upstream.commit_transaction(30)
            tp = TopicPartition(topic, 0)
            deadline = time.monotonic() + 10
            while source.last_stable_offsets([tp])[tp] < 10 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert plan(source, topic, 1000, previous=first).ranges == (OffsetRange(topic, 0, 6, 10),)
    finally:
        upstream.flush(0)


def test_new_partitions_of_an_input_topic_are_picked_up(kafka_broker):
    require(kafka_broker, LSO_FROM_LIST_OFFSETS)
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="grow")
    produce_txn(config, topic, [b"x"] * 3, 0, True)
    with KafkaOffsetSource(config) as source:
        first = plan(source, topic, 100)
        assert first.ranges == (OffsetRange(topic, 0, 0, 4),)
        admin = AdminClient(config)  # kept alive until the future resolves
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
        produce_txn(config, topic, [b"y"] * 2, 1, True)
        deadline = time.monotonic() + 10
        while len(source.partitions([topic])) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        second = plan(source, topic, 100, previous=first)
    assert second.ranges == (OffsetRange(topic, 0, 4, 4), OffsetRange(topic, 1, 0, 3))
