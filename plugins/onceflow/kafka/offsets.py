"""Where input partitions stand, and the offset ranges of the next batch.

Runs on an Airflow worker (plan task). ``KafkaOffsetSource`` has the four
abilities the planner needs (``partitions``, ``earliest``, ``last_stable``,
``offset_for_time``); ``plan_ranges`` is a complete planner on top of it:

    end = min(last stable offset, start + max records per partition)

so a range never reaches into a transaction that is still open upstream.
A partition the previous batch did not know (new partitions of an input
topic) starts at the configured start position. A range whose start was
deleted by retention fails the plan (``check_not_lost``): never skipped.

``last_stable`` trusts ListOffsets(read_committed); brokers where that is
wrong (Tansu) lack LSO_FROM_LIST_OFFSETS and cannot be planned against.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ..protocol.plan import OffsetRange
from .config import consumer_config

EARLIEST = "earliest"
LATEST = "latest"


class OffsetsLostError(RuntimeError):
    """The planned start of a partition was deleted by retention."""


def check_not_lost(rng: OffsetRange, earliest: int) -> None:
    """Fail when ``rng`` starts before the partition's earliest retained offset."""
    if rng.start < earliest:
        raise OffsetsLostError(
            f"{rng.topic}[{rng.partition}]: offsets [{rng.start}, {earliest}) were deleted by retention before "
            f"this pipeline read them ({earliest - rng.start} records lost). Nothing was skipped: decide whether "
            "to accept the loss (restart the pipeline's offsets at the earliest retained offset) or restore the "
            "data, then re-run the plan"
        )


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

    def partitions(self, topic: str) -> list[int]:
        meta = self._consumer.list_topics(topic, timeout=self.timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            reason = meta.error if meta is not None and meta.error is not None else "no partitions"
            raise KafkaException(f"input topic {topic!r} is not readable ({reason}): create it or fix the pipeline's topics")
        return sorted(meta.partitions)

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        # With isolation.level=read_committed the high mark is the last stable offset.
        return self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=self.timeout_s, cached=False)

    def earliest(self, topic: str, partition: int) -> int:
        return self._watermarks(topic, partition)[0]

    def last_stable(self, topic: str, partition: int) -> int:
        return self._watermarks(topic, partition)[1]

    def offset_for_time(self, topic: str, partition: int, ts_ms: int) -> int:
        """First offset whose timestamp is >= ``ts_ms``; the last stable offset if none is."""
        found = self._consumer.offsets_for_times([TopicPartition(topic, partition, ts_ms)], timeout=self.timeout_s)[0]
        if found.error is not None:
            raise KafkaException(found.error)
        return found.offset if found.offset >= 0 else self.last_stable(topic, partition)


def start_offset(source: KafkaOffsetSource, topic: str, partition: int, start_position: str | int) -> int:
    """Where a partition unknown to earlier batches starts: 'earliest', 'latest' or a timestamp in ms."""
    if start_position == EARLIEST:
        return source.earliest(topic, partition)
    if start_position == LATEST:
        return source.last_stable(topic, partition)
    if isinstance(start_position, int) and not isinstance(start_position, bool):
        return source.offset_for_time(topic, partition, start_position)
    raise ValueError(f"start position {start_position!r}: use 'earliest', 'latest' or a timestamp in milliseconds")


def plan_ranges(
    source: KafkaOffsetSource,
    topics: Sequence[str],
    previous_ends: Mapping[tuple[str, int], int],
    max_records_per_partition: int,
    start_position: str | int = EARLIEST,
) -> tuple[OffsetRange, ...]:
    """The next batch's ranges: each starts where the previous batch ended (I1)."""
    if max_records_per_partition < 1:
        raise ValueError(f"max records per partition must be >= 1, got {max_records_per_partition}")
    ranges = []
    for topic in topics:
        for partition in source.partitions(topic):
            start = previous_ends.get((topic, partition))
            if start is None:
                start = start_offset(source, topic, partition, start_position)
            check_not_lost(OffsetRange(topic, partition, start, start), source.earliest(topic, partition))
            stable = source.last_stable(topic, partition)
            end = max(start, min(stable, start + max_records_per_partition))
            ranges.append(OffsetRange(topic, partition, start, end))
    return tuple(ranges)
