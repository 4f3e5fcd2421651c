"""Where input partitions stand: the planner's view of Kafka.

Runs on an Airflow worker (plan task) and in the audit. ``KafkaOffsetSource``
implements ``onceflow.protocol.planning.OffsetSource``; the planning rules
(start where the last committed batch ended, ``end = min(last stable offset,
start + max records per partition)``, new partitions from the start position,
offsets lost to retention fail the plan) live in ``protocol.planning`` only.

Offsets are those of a ``read_committed`` consumer: the high watermark it
reports is the last stable offset, so a range never reaches into a
transaction that is still open upstream. Brokers where ListOffsets
(read_committed) is wrong (Tansu) lack LSO_FROM_LIST_OFFSETS and cannot be
planned against.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition as KafkaTopicPartition

from ..protocol.planning import TopicPartition
from .config import consumer_config


class KafkaOffsetSource:
    """Offsets of input partitions, through one read_committed consumer. Use as a context manager."""

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 30.0):
        self.timeout_s = timeout_s
        self._consumer = Consumer(consumer_config(config, "onceflow-offset-source"))

    def __enter__(self) -> "KafkaOffsetSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def partitions(self, topics: Sequence[str]) -> list[TopicPartition]:
        found = []
        for topic in topics:
            meta = self._consumer.list_topics(topic, timeout=self.timeout_s).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                reason = meta.error if meta is not None and meta.error is not None else "no partitions"
                raise KafkaException(f"input topic {topic!r} is not readable ({reason}): create it or fix the pipeline's topics")
            found.extend(TopicPartition(topic, p) for p in sorted(meta.partitions))
        return found

    def _watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        # With isolation.level=read_committed the high mark is the last stable offset.
        return self._consumer.get_watermark_offsets(
            KafkaTopicPartition(tp.topic, tp.partition), timeout=self.timeout_s, cached=False
        )

    def earliest_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._watermarks(tp)[0] for tp in partitions}

    def last_stable_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._watermarks(tp)[1] for tp in partitions}

    def offsets_for_timestamp(self, partitions: Sequence[TopicPartition], timestamp_ms: int) -> dict[TopicPartition, int]:
        """First offset whose timestamp is >= ``timestamp_ms``; the last stable offset if none is."""
        query = [KafkaTopicPartition(tp.topic, tp.partition, timestamp_ms) for tp in partitions]
        result = {}
        for tp, found in zip(partitions, self._consumer.offsets_for_times(query, timeout=self.timeout_s)):
            if found.error is not None:
                raise KafkaException(found.error)
            result[tp] = found.offset if found.offset >= 0 else self._watermarks(tp)[1]
        return result
