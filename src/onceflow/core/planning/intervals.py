"""Interval batches: a DAG run's batch is the records of its data interval.

For a pipeline declared with ``batches="interval"``, the batch of the run
whose data interval is ``[a, b)`` reads, per input partition, the offsets
``[B(a), B(b))``, where the *boundary* ``B(t)`` is the first offset whose
record is stamped at or after ``t`` (Kafka's ListOffsets by timestamp).

The tiling invariant (I8): per partition, the committed intervals cover the
log between their boundaries without gap or overlap, whatever order and
however concurrently they are planned. It rests on two rules:

- each boundary is resolved once and written to the ledger with
  create-if-absent (``boundaries/<t>.json``); both neighbouring intervals
  read that one record, so they meet exactly;
- boundaries are monotonic in ``t``. ``B(t)`` as Kafka answers it is (a
  record stamped >= t' >= t is also stamped >= t); only a boundary fixed by
  the grace period (no record at or after ``t`` yet: the last stable offset)
  could lie above a later one, so a boundary is resolved no higher than the
  nearest boundary already recorded after it (``later``).

A late record (stamped in an interval whose end boundary is already fixed)
is at an offset after that boundary: it belongs to the interval whose
boundaries enclose its offset, exactly one.

An interval is planned only once it is *closed*: every partition has a
committed record at or after its end (its end boundary can no longer move),
or ``grace_ms`` has passed since its end, or a later boundary is recorded.
Pure: an ``OffsetSource`` gives the log, the caller gives the ledger's
records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from onceflow.core.batch_id import BatchId
from onceflow.core.plan import Interval, OffsetRange, Plan, SinkPlan, iso
from onceflow.core.planning.source import OffsetSource, OffsetsLostError, PlanningError, TopicPartition, check_not_lost


@dataclass(frozen=True)
class Boundary:
    """Where instant ``instant_ms`` falls in each input partition, fixed once.

    ``how`` says why each offset is where it is: ``record`` (the first record
    stamped at or after the instant), ``grace`` (none yet when the grace
    period ended: the last stable offset then), ``later`` (held down to a
    boundary already recorded after it). A partition missing from
    ``offsets`` joined the pipeline after the boundary was fixed: it starts
    at its first record (offset 0)."""

    instant_ms: int
    offsets: Mapping[TopicPartition, int]
    how: Mapping[TopicPartition, str] = field(default_factory=dict)
    resolved_at_ms: int = 0

    def offset(self, tp: TopicPartition) -> int:
        return self.offsets.get(tp, 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "instant_ms": self.instant_ms,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition, "offset": offset, "how": self.how.get(tp, "record")}
                for tp, offset in sorted(self.offsets.items())
            ],
            "resolved_at_ms": self.resolved_at_ms,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Boundary":
        rows = [(TopicPartition(str(r["topic"]), int(r["partition"])), r) for r in raw["partitions"]]
        return cls(
            int(raw["instant_ms"]),
            {tp: int(r["offset"]) for tp, r in rows},
            {tp: str(r.get("how", "record")) for tp, r in rows},
            int(raw.get("resolved_at_ms", 0)),
        )


@dataclass(frozen=True)
class IntervalBatch:
    """Batch ``batch_seq`` is the ``index``-th batch of data interval ``interval``
    (1: its first; the next one after an abort replays it)."""

    interval: Interval
    index: int
    batch_seq: int

    def to_dict(self) -> dict[str, Any]:
        return {"interval": self.interval.to_dict(), "index": self.index, "batch_seq": self.batch_seq}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "IntervalBatch":
        return cls(Interval.from_dict(raw["interval"]), int(raw["index"]), int(raw["batch_seq"]))


class PlanMustWait(PlanningError):
    """The batch cannot be planned yet, and will be later: wait, then plan again."""


class IntervalNotClosed(PlanMustWait):
    """The interval's end can still move: the plan must wait (never guess)."""

    def __init__(self, message: str, waiting: Sequence[TopicPartition], grace_ends_ms: int):
        super().__init__(message)
        self.waiting = tuple(waiting)
        self.grace_ends_ms = grace_ends_ms


class SlotBusy(PlanMustWait):
    """Every slot (``batches_in_flight``) is held by a batch in flight."""


class ReprocessRefused(PlanningError):
    """A committed interval was asked to be reprocessed into an output that can
    neither retract nor safely publish again what it already holds."""


def resolve_boundary(
    instant_ms: int,
    partitions: Sequence[TopicPartition],
    source: OffsetSource,
    *,
    later: Boundary | None,
    now_ms: int,
    grace_ms: int,
    what: str,
) -> Boundary:
    """The boundary at ``instant_ms``, to be recorded once (see the module doc).

    Raises ``IntervalNotClosed`` while a partition has no committed record
    stamped at or after the instant, the grace period is running and no
    later boundary is recorded. ``what`` names the interval for messages."""
    stable = source.last_stable_offsets(partitions)
    first = source.offsets_for_timestamp(partitions, instant_ms)  # the last stable offset where none is
    offsets, how = {}, {}
    waiting = []
    for tp in partitions:
        found = first[tp] < stable[tp]
        if later is not None and (not found or first[tp] > later.offset(tp)):
            offsets[tp], how[tp] = later.offset(tp), "later"
        elif found:
            offsets[tp], how[tp] = first[tp], "record"
        else:
            offsets[tp], how[tp] = stable[tp], "grace"
            waiting.append(tp)
    grace_ends = instant_ms + grace_ms
    if waiting and now_ms < grace_ends:
        names = ", ".join(f"{tp.topic}[{tp.partition}] (last stable offset {stable[tp]})" for tp in waiting)
        raise IntervalNotClosed(
            f"{what} is not closed yet: no committed record stamped at or after {iso(instant_ms)} in {names}, so records "
            f"of the interval may still arrive. Waiting for one, or for the grace period to end at {iso(grace_ends)} "
            "(interval_grace_s).",
            waiting,
            grace_ends,
        )
    return Boundary(instant_ms, offsets, how, now_ms)


def interval_plan(
    *,
    pipeline: str,
    seq: int,
    interval: Interval,
    start: Boundary,
    end: Boundary,
    partitions: Sequence[TopicPartition],
    source: OffsetSource,
    sinks: Callable[[int], Sequence[SinkPlan]],
    now_ms: int,
    **facts: Any,
) -> Plan:
    """The plan of batch ``seq``: the records of ``interval``, ``[B(start), B(end))`` per partition.
    ``sinks``: the sinks of a batch of that many records. ``facts``: the planner's other facts of the
    plan (run id, slot...)."""
    ranges = []
    for tp in sorted(partitions):
        a, b = start.offset(tp), end.offset(tp)
        if b < a:
            raise PlanningError(
                f"cannot plan interval {interval} of pipeline {pipeline!r}: its boundaries in {tp.topic}[{tp.partition}] "
                f"are out of order ({a} at {iso(start.instant_ms)}, {b} at {iso(end.instant_ms)}). The ledger's "
                "boundaries were edited or the topic was recreated; restore them, or start a new pipeline name."
            )
        ranges.append(OffsetRange(tp.topic, tp.partition, a, b))
    check_not_lost(
        f"interval {interval} (batch {BatchId(seq)}) of pipeline {pipeline!r}",
        {TopicPartition(r.topic, r.partition): r.start for r in ranges if r.size},
        source,
    )
    records = sum(r.size for r in ranges)
    return Plan(
        pipeline, seq, tuple(ranges), tuple(sinks(records)), now_ms, replay_of=None,
        interval=interval, backlog=records, **facts,
    )


def replacement_refusal(plan: Plan, replaced: Plan | None, replaced_committed: bool) -> str | None:
    """Why ``plan`` may not remove or overwrite the committed batch it names (``plan.replaces``),
    or None when it may: a batch replaces only a committed batch of its own interval that read
    exactly its ranges, as the interval planner records when a run asks to reprocess (I7).
    Anything else in a ledger (a plan of the old format that took a run's conf for a fact, an
    edited record) would delete committed output: the commit refuses it and the audit reports it."""
    if plan.replaces is None:
        return None
    target = BatchId(plan.replaces.batch_seq)
    what = f"batch {plan.batch_id} names committed batch {target} as the batch it replaces"
    if plan.interval is None:
        return f"{what}, but it reads no data interval: only a reprocessed interval replaces a batch"
    if replaced is None or plan.replaces.batch_seq >= plan.batch_seq:
        return f"{what}, but no batch {target} was planned before it"
    if replaced.interval != plan.interval:
        return f"{what}, but batch {target} read interval {replaced.interval}, not {plan.interval}"
    if replaced.ranges != plan.ranges:
        return f"{what}, but batch {target} read other offset ranges of interval {plan.interval}"
    if not replaced_committed:
        return f"{what}, but batch {target} is not committed"
    return None


def slot_of(seq: int, pool: int) -> int:
    """The slot batch ``seq`` takes of ``pool`` (``batches_in_flight``). Batches ``seq`` and
    ``seq - pool`` share one: a batch is planned only once the one before it in its slot
    is finished, so at most ``pool`` batches are in flight."""
    return seq % pool


__all__ = [
    "Boundary",
    "Interval",
    "IntervalBatch",
    "IntervalNotClosed",
    "OffsetsLostError",
    "PlanMustWait",
    "ReprocessRefused",
    "SlotBusy",
    "interval_plan",
    "iso",
    "replacement_refusal",
    "resolve_boundary",
    "slot_of",
]
