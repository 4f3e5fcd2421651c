"""How far a pipeline lags its input: per partition, the records between the
end of the last committed batch and the last stable offset, and the age of
the oldest of them (the UI page and the metrics show it)."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from onceflow.core.planning.source import TopicPartition
from onceflow.core.planning.interval_planner import committed_prefix

if TYPE_CHECKING:
    from onceflow.core.batch_view import LedgerView


class LagSource(Protocol):
    """What the lag asks of the input log (``onceflow.kafka.offsets.KafkaOffsetSource`` is one).
    Offsets are those a ``read_committed`` consumer sees."""

    def partitions(self, topics: Sequence[str]) -> Sequence[TopicPartition]: ...

    def earliest_offsets(self, partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, int]: ...

    def last_stable_offsets(self, partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, int]: ...

    def timestamps_at(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int | None]:
        """The timestamp (epoch ms) of the record at each offset; None where there is none (yet)."""
        ...


class PipelineInput(Protocol):
    """A pipeline's input, as the lag reads it from its spec (``PipelineSpec`` is one)."""

    @property
    def topics(self) -> Sequence[str]: ...


class LagRuntime(Protocol):
    """What the lag needs of a pipeline (``onceflow.pipeline.runtime.PipelineRuntime`` is one):
    its input topics, a reader of its ledger, and its input log."""

    @property
    def spec(self) -> PipelineInput: ...

    @property
    def reader(self) -> LedgerView: ...

    def offset_source(self, timeout_s: float = 30.0) -> AbstractContextManager[LagSource]: ...


def consumed_to(reader: LedgerView) -> dict[tuple[str, int], int]:
    """Per (topic, partition), the offset the pipeline has committed up to: the
    ends of the newest committed batch (an interval pipeline: of its committed
    prefix); before any commit, where the first batch starts (the spec's start
    position)."""
    ledger = reader.ledger
    latest = reader.latest_seq()
    if latest and reader.plan(latest).interval is not None:
        prefix = committed_prefix(reader, advance_hint=False)
        if prefix is not None:
            return {(r.topic, r.partition): r.end for r in prefix.ranges}
        # none yet: where the earliest interval planned starts (its first batch; later ones read the same ranges)
        planned = ledger.planned_intervals()  # empty only while the one plan is not bound to its interval yet
        earliest = min(planned, key=lambda i: i.start_ms) if planned else None
        first = reader.plan(ledger.read_interval_batch(earliest, 1).batch_seq if earliest else latest)
        return {(r.topic, r.partition): r.start for r in first.ranges}
    committed = reader.newest_committed_seq(latest)
    if committed:
        return {(r.topic, r.partition): r.end for r in ledger.read_plan(committed).ranges}
    first = ledger.read_plan(1) if latest else None
    return {(r.topic, r.partition): r.start for r in first.ranges} if first else {}


def input_lag(runtime: LagRuntime, now: int | None = None, timeout_s: float = 30.0,
              source: LagSource | None = None) -> list[dict[str, Any]]:
    """Per input partition: the committed end, the last stable offset, the
    records between them, and the age of the oldest record not yet committed.
    ``timeout_s`` bounds each Kafka request. ``source``: an open offset source
    to ask (a caller that looks again and again keeps one); default: one opened
    for this call."""
    if source is None:
        with runtime.offset_source(timeout_s) as opened:
            return input_lag(runtime, now, timeout_s, opened)
    now = int(time.time() * 1000) if now is None else now
    ends = consumed_to(runtime.reader)
    partitions = source.partitions(runtime.spec.topics)
    stable = source.last_stable_offsets(partitions)
    missing = [tp for tp in partitions if (tp.topic, tp.partition) not in ends]
    earliest = source.earliest_offsets(missing) if missing else {}
    starts = {tp: ends.get((tp.topic, tp.partition), earliest.get(tp, 0)) for tp in partitions}
    behind = {tp: starts[tp] for tp in partitions if stable[tp] > starts[tp]}
    stamps = source.timestamps_at(behind)
    rows = []
    for tp in partitions:
        stamp = stamps.get(tp)
        rows.append(
            {
                "topic": tp.topic, "partition": tp.partition, "committed_end": starts[tp],
                "last_stable": stable[tp], "lag": max(0, stable[tp] - starts[tp]),
                "oldest_uncommitted_age_s": None if stamp is None else max(0.0, (now - stamp) / 1000),
            }
        )
    return rows
