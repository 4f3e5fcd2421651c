"""Range planning: ends at the last stable offset, picks up new partitions, never skips lost offsets."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from onceflow.kafka.offsets import EARLIEST, LATEST, KafkaOffsetSource, OffsetsLostError, check_not_lost, plan_ranges
from onceflow.protocol.plan import OffsetRange
from onceflow.services.kafka_broker import LSO_FROM_LIST_OFFSETS
from tests.kafka.helpers import create_topic, produce_txn
from tests.support import require


class FixedOffsets:
    """An offset source with fixed answers (pure planning logic)."""

    def __init__(self, partitions, earliest=0, stable=100):
        self._partitions, self._earliest, self._stable = partitions, earliest, stable

    def partitions(self, topic):
        return self._partitions

    def earliest(self, topic, p):
        return self._earliest

    def last_stable(self, topic, p):
        return self._stable

    def offset_for_time(self, topic, p, ts_ms):
        return 42


def test_end_is_min_of_last_stable_and_max_records():
    source = FixedOffsets([0, 1], stable=100)
    ranges = plan_ranges(source, ["t"], {("t", 0): 10, ("t", 1): 95}, max_records_per_partition=20)
    assert ranges == (OffsetRange("t", 0, 10, 30), OffsetRange("t", 1, 95, 100))


def test_unknown_partitions_start_at_the_configured_position():
    source = FixedOffsets([0, 1, 2], earliest=3, stable=50)
    known = {("t", 0): 10, ("t", 1): 10}
    assert plan_ranges(source, ["t"], known, 100, EARLIEST)[2] == OffsetRange("t", 2, 3, 50)
    assert plan_ranges(source, ["t"], known, 100, LATEST)[2] == OffsetRange("t", 2, 50, 50)
    assert plan_ranges(source, ["t"], known, 100, 1_700_000_000_000)[2] == OffsetRange("t", 2, 42, 50)


def test_offsets_deleted_by_retention_fail_the_plan_naming_them():
    source = FixedOffsets([0], earliest=70, stable=100)
    with pytest.raises(OffsetsLostError, match=r"t\[0\]: offsets \[40, 70\) were deleted .* \(30 records lost\)"):
        plan_ranges(source, ["t"], {("t", 0): 40}, 10)
    check_not_lost(OffsetRange("t", 0, 70, 80), 70)  # starting exactly at the earliest is fine


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
            assert plan_ranges(source, [topic], {}, 1000) == (OffsetRange(topic, 0, 0, 6),)
            assert plan_ranges(source, [topic], {}, 4) == (OffsetRange(topic, 0, 0, 4),)
            upstream.commit_transaction(30)
            deadline = time.monotonic() + 10
            while source.last_stable(topic, 0) < 10 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert plan_ranges(source, [topic], {(topic, 0): 6}, 1000) == (OffsetRange(topic, 0, 6, 10),)
    finally:
        upstream.flush(0)


def test_new_partitions_of_an_input_topic_are_picked_up(kafka_broker):
    require(kafka_broker, LSO_FROM_LIST_OFFSETS)
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="grow")
    produce_txn(config, topic, [b"x"] * 3, 0, True)
    with KafkaOffsetSource(config) as source:
        first = plan_ranges(source, [topic], {}, 100)
        assert first == (OffsetRange(topic, 0, 0, 4),)
        admin = AdminClient(config)
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
        produce_txn(config, topic, [b"y"] * 2, 1, True)
        deadline = time.monotonic() + 10
        while len(source.partitions(topic)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        second = plan_ranges(source, [topic], {(topic, 0): 4}, 100)
    assert second == (OffsetRange(topic, 0, 4, 4), OffsetRange(topic, 1, 0, 3))
