"""The input log as planning sees it: its partitions, their offsets, and records lost to retention.

``OffsetSource`` is implemented over Kafka in ``onceflow.kafka.offsets``; the
tests give stand-ins. Both planners read the log only through it.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Protocol, Sequence, runtime_checkable

from onceflow.core.errors import OffsetsLostError, PlanningError  # noqa: F401  (re-exported: planning raises them)


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@runtime_checkable
class OffsetSource(Protocol):
    """What planning needs from the input log (Kafka). Offsets are those a
    ``read_committed`` consumer sees."""

    def partitions(self, topics: Sequence[str]) -> Sequence[TopicPartition]:
        """Every partition of ``topics``. Unknown topic: raise, naming it."""

    def earliest_offsets(self, partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, int]:
        """The first offset still in the log, per partition."""

    def last_stable_offsets(self, partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, int]:
        """The last stable offset (read_committed end), per partition."""

    def offsets_for_timestamp(self, partitions: Sequence[TopicPartition], timestamp_ms: int) -> Mapping[TopicPartition, int]:
        """The first offset whose timestamp is >= ``timestamp_ms``; the last
        stable offset when there is none."""

    def topic_ids(self, topics: Sequence[str]) -> Mapping[str, str]:
        """Each topic's id (Kafka's topic UUID), for those the broker reports: a
        recreated topic has a new one."""


def check_not_lost(what: str, starts: Mapping[TopicPartition, int], source: OffsetSource) -> None:
    """``what`` (a batch) must start at ``starts``: raise ``OffsetsLostError`` if retention deleted any of them."""
    earliest = source.earliest_offsets(list(starts))
    lost = {tp: (start, earliest[tp]) for tp, start in starts.items() if start < earliest[tp]}
    if lost:
        where = "; ".join(f"{tp.topic}[{tp.partition}] offsets {a}..{b - 1}" for tp, (a, b) in sorted(lost.items()))
        raise OffsetsLostError(
            f"{what} must start at offsets the log no longer holds "
            f"(deleted by retention before onceflow read them): {where}. Those records are lost to this pipeline. "
            "Raise the topic's retention and either restore the records or, knowingly, start a new pipeline name "
            "from 'earliest'; onceflow never skips them silently.",
            lost,
        )
