"""After a commit the input group's committed offsets equal the batch's range ends (lag tools tell the truth)."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, TopicPartition

from onceflow.sources.kafka.offsets_mirror import mirror_offsets
from onceflow.core.participant import Outcome
from onceflow.core.plan import OffsetRange
from tests.integration.kafka.helpers import create_topic, produce_txn


def _committed(config, group, topic, partitions) -> list[int]:
    consumer = Consumer({**config, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)]
    finally:
        consumer.close()


def test_group_offsets_equal_the_range_ends_and_never_move_back(kafka_broker):
    config = kafka_broker.config()
    topic = create_topic(config, partitions=2, prefix="in")
    for p in range(2):
        produce_txn(config, topic, [b"x"] * 5, p, True)
    group = f"pipeline-{uuid.uuid4().hex[:6]}"
    batch1 = [OffsetRange(topic, 0, 0, 3), OffsetRange(topic, 1, 0, 6)]
    batch2 = [OffsetRange(topic, 0, 3, 6), OffsetRange(topic, 1, 6, 6)]

    assert mirror_offsets(config, group, batch1).outcome is Outcome.DONE
    assert _committed(config, group, topic, 2) == [3, 6]
    assert mirror_offsets(config, group, batch1).outcome is Outcome.ALREADY_DONE
    assert mirror_offsets(config, group, batch2).outcome is Outcome.DONE
    assert _committed(config, group, topic, 2) == [6, 6]
    # A late retry of the older batch does not make lag jump backwards.
    assert mirror_offsets(config, group, batch1).outcome is Outcome.ALREADY_DONE
    assert _committed(config, group, topic, 2) == [6, 6]
