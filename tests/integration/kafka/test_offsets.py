"""Planning against a real broker: ranges end at the last stable offset and
new partitions are picked up. The last stable offset comes from a
read_committed fetch, so these run on Tansu too (its ListOffsets is wrong).
The planning rules themselves (one planner, protocol.planning) are
unit-tested in tests/unit/core/test_planning.py."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from onceflow.kafka.offsets import KafkaOffsetSource, OffsetLookupError
from onceflow.core.plan import OffsetRange, SinkPlan
from onceflow.core.planning.config import PlanConfig
from onceflow.core.planning.offsets import next_plan
from onceflow.core.planning.source import TopicPartition
from onceflow.core.states import BatchState
from onceflow_devkit.services.kafka_broker import ADDS_PARTITIONS
from tests.integration.kafka.helpers import create_topic, produce_txn
from tests.support import require


def plan(source, topic: str, max_records: int | None, previous=None, start="earliest"):
    """The next plan after ``previous`` (taken as committed), as the plan task computes it."""
    config = PlanConfig(topics=(topic,), sinks=(SinkPlan("out", "files", 1),), max_records_per_partition=max_records, start=start)
    return next_plan(
        pipeline="p", previous=previous, previous_state=BatchState.COMMITTED if previous else None,
        source=source, config=config, now_ms=0,
    )


def wait_for_stable(source, topic: str, partition: int, at_least: int) -> None:
    tp = TopicPartition(topic, partition)
    deadline = time.monotonic() + 10
    while source.last_stable_offsets([tp])[tp] < at_least and time.monotonic() < deadline:
        time.sleep(0.1)


def test_plan_never_reaches_into_an_open_upstream_transaction(kafka_broker):
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="lso")
    produce_txn(config, topic, [b"c%d" % i for i in range(5)], 0, True)  # offsets 0-4, marker 5
    upstream = Producer({**config, "transactional.id": f"upstream-{topic}"})
    upstream.init_transactions(30)
    upstream.begin_transaction()
    for i in range(3):
        upstream.produce(topic, b"open%d" % i, partition=0)  # offsets 6-8
    upstream.flush(30)
    plain = Producer(config)
    plain.produce(topic, b"after", partition=0)  # offset 9: written after the open transaction began
    plain.flush(30)
    try:
        with KafkaOffsetSource(config) as source:
            first = plan(source, topic, 1000)
            assert first.ranges == (OffsetRange(topic, 0, 0, 6),)
            assert plan(source, topic, 4).ranges == (OffsetRange(topic, 0, 0, 4),)
            upstream.commit_transaction(30)  # marker 10
            wait_for_stable(source, topic, 0, 11)
            assert plan(source, topic, 1000, previous=first).ranges == (OffsetRange(topic, 0, 6, 11),)
    finally:
        upstream.flush(0)


def test_a_partition_holding_only_an_open_transaction_plans_nothing(kafka_broker):
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="onlyopen")
    upstream = Producer({**config, "transactional.id": f"upstream-{topic}"})
    upstream.init_transactions(30)
    upstream.begin_transaction()
    for i in range(3):
        upstream.produce(topic, b"open%d" % i, partition=0)
    upstream.flush(30)
    try:
        with KafkaOffsetSource(config) as source:
            assert plan(source, topic, None).ranges == (OffsetRange(topic, 0, 0, 0),)
            assert plan(source, topic, None, start="latest").ranges == (OffsetRange(topic, 0, 0, 0),)
    finally:
        upstream.abort_transaction(30)


def test_a_non_transactional_topic_is_planned_to_its_end_and_empty_partitions_to_zero(kafka_broker):
    """The clickstream input: plain records, one partition never written to."""
    config = kafka_broker.config()
    topic = create_topic(config, partitions=3, prefix="clicks")
    producer = Producer(config)
    for i in range(150):
        producer.produce(topic, b"x" * 100, partition=0)
        producer.produce(topic, b"y" * 100, partition=1)
    producer.flush(30)
    with KafkaOffsetSource(config) as source:
        first = plan(source, topic, None)
        assert first.ranges == (OffsetRange(topic, 0, 0, 150), OffsetRange(topic, 1, 0, 150), OffsetRange(topic, 2, 0, 0))
        assert plan(source, topic, 100).ranges[:2] == (OffsetRange(topic, 0, 0, 100), OffsetRange(topic, 1, 0, 100))
        producer.produce(topic, b"z", partition=2)
        producer.flush(30)
        wait_for_stable(source, topic, 2, 1)
        assert plan(source, topic, None, previous=first).ranges == (
            OffsetRange(topic, 0, 150, 150), OffsetRange(topic, 1, 150, 150), OffsetRange(topic, 2, 0, 1),
        )


def test_new_partitions_of_an_input_topic_are_picked_up(kafka_broker):
    require(kafka_broker, ADDS_PARTITIONS)
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


def test_a_partition_that_does_not_answer_fails_the_lookup_naming_it(kafka_broker):
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="missing")
    with KafkaOffsetSource(config, timeout_s=2) as source:
        with pytest.raises(OffsetLookupError, match=rf"{topic}\[3\] returned no fetch response within 2s"):
            source.last_stable_offsets([TopicPartition(topic, 0), TopicPartition(topic, 3)])


def test_a_timestamp_start_begins_at_the_first_record_stamped_at_or_after_it(kafka_broker):
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="since")
    base = int(time.time() * 1000) - 60_000  # recent: retention deletes records stamped long ago
    producer = Producer(config)
    for stamp in (base + 1_000, base + 2_000, base + 3_000):
        producer.produce(topic, b"v", partition=0, timestamp=stamp)  # offsets 0, 1, 2
    producer.flush(30)
    tp = TopicPartition(topic, 0)
    with KafkaOffsetSource(config) as source:
        found = {t: source.offsets_for_timestamp([tp], base + t)[tp] for t in (0, 1_500, 3_000, 5_000)}
        assert found == {0: 0, 1_500: 1, 3_000: 2, 5_000: 3}  # 3: nothing stamped so late, start at the end
        assert plan(source, topic, None, start=f"timestamp:{base + 1_500}").ranges == (OffsetRange(topic, 0, 1, 3),)


def test_topic_ids_are_those_the_broker_reports_and_a_recreated_topic_gets_a_new_one(kafka_broker):
    from onceflow.kafka.admin import delete_topics, ensure_topics

    topic = f"ids-{uuid.uuid4().hex[:6]}"
    ensure_topics(kafka_broker.config(), [topic], partitions=1)
    with KafkaOffsetSource(kafka_broker.config(), timeout_s=10) as source:
        first = source.topic_ids([topic])
        assert set(first) <= {topic}  # an all-zero id (no id reported) is left out, never compared
        if not first:
            pytest.skip(reason=f"{kafka_broker.name} lacks: topic ids in DescribeTopics (KIP-516); it reports all zeros")
        delete_topics(kafka_broker.config(), [topic])
        ensure_topics(kafka_broker.config(), [topic], partitions=1)
        assert source.topic_ids([topic])[topic] != first[topic]
