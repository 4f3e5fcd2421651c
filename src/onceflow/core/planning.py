"""Planning: which offsets the next batch reads (I1, I6).

Runs in the Airflow plan task, through ``Coordinator.plan_next``, after
recovery has finished the previous batch. ``next_plan`` is pure: the ledger
gives it the previous batch, an ``OffsetSource`` (implemented over Kafka in
onceflow.kafka) gives it the log's current bounds.

Rules:
- after a COMMITTED batch, every partition starts exactly at its end (I1);
- after an ABORTED batch, the next plan re-reads the same ranges exactly
  (``replay_of``), so a re-run reproduces the same input (I6), smaller only
  when a replay was aborted too, the run asks for fewer records, or an
  operator split it; an operator's skip starts it where the aborted batch
  ended, as a commit would (``core.interventions``);
- a partition never seen before starts at the configured start position
  (earliest, latest, or the first offset at or after a timestamp);
- a range ends at ``min(last stable offset, start + max_records_per_partition)``;
- a start below the earliest offset still in the log means records were
  deleted by retention before being read: ``OffsetsLostError``, never skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import (
    Any,
    Callable,
    Mapping,
    NamedTuple,
    Protocol,
    Sequence,
    runtime_checkable,
)

from onceflow.core.batch_id import BatchId
from onceflow.core.interventions import Action, Intervention
from onceflow.core.plan import OffsetRange, Plan, SinkPlan
from onceflow.core.states import BatchState


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


class PlanningError(RuntimeError):
    """The next batch cannot be planned; the message says why and what to do."""


class OffsetsLostError(PlanningError):
    """Records the next batch must read are gone from the log (retention)."""

    def __init__(self, message: str, lost: Mapping[TopicPartition, tuple[int, int]]):
        super().__init__(message)
        self.lost = dict(lost)


@dataclass(frozen=True)
class StartPosition:
    """Where a partition without committed batches starts."""

    kind: str  # "earliest" | "latest" | "timestamp"
    timestamp_ms: int | None = None

    @classmethod
    def parse(cls, value: "StartPosition | str | int") -> "StartPosition":
        if isinstance(value, StartPosition):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return cls("timestamp", value)
        text = str(value).strip().lower()
        if text in ("earliest", "latest"):
            return cls(text)
        if text.startswith("timestamp:") and text[10:].isdigit():
            return cls("timestamp", int(text[10:]))
        from onceflow.config.settings import ConfigurationError

        raise ConfigurationError(
            f"start_position {value!r} is not valid: use 'earliest', 'latest', or a timestamp in epoch "
            "milliseconds (an int or 'timestamp:<ms>')"
        )

    def __str__(self) -> str:
        return f"timestamp:{self.timestamp_ms}" if self.kind == "timestamp" else self.kind


def no_transactional_ids(pipeline: str, sink: SinkPlan, batch_seq: int) -> tuple[str, ...]:
    """For sinks that write inside no transaction: nothing to fence."""
    return ()


@dataclass(frozen=True)
class PlanConfig:
    topics: tuple[str, ...]
    sinks: tuple[SinkPlan, ...]
    start: StartPosition = StartPosition("earliest")
    max_records_per_partition: int | None = None
    # (pipeline, sink plan, batch seq) -> the transactional ids of the sink's splits in that
    # batch, derived so that rollback can fence them even when a job died before voting.
    # The sink's kind answers (onceflow.sinks); planning never asks which kind it is.
    transactional_ids: Callable[..., tuple[str, ...]] = no_transactional_ids
    # The transform's run parameters (``RunInputs.transform``): recorded in each plan, read by the transform only.
    transform_params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from onceflow.config.settings import ConfigurationError

        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(self, "sinks", tuple(self.sinks))
        object.__setattr__(self, "start", StartPosition.parse(self.start))
        if not self.topics:
            raise ConfigurationError("topics is empty: name at least one input topic")
        if self.max_records_per_partition is not None and self.max_records_per_partition < 1:
            raise ConfigurationError(
                f"max_records_per_partition must be >= 1 or None (no limit), got {self.max_records_per_partition}"
            )
        names = [s.name for s in self.sinks]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"sink names must be unique, got {names}")


def with_ids(pipeline: str, config: PlanConfig, seq: int) -> tuple[SinkPlan, ...]:
    """The config's sinks, each with the transactional ids its splits may use in batch ``seq``."""
    return tuple(replace(s, transactional_ids=tuple(config.transactional_ids(pipeline, s, seq))) for s in config.sinks)


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


def _check_same_topics(pipeline: str, seq: int, previous: Plan | None, ids: Mapping[str, str]) -> None:
    """A topic deleted and created again under the same name is another log: its
    offsets say nothing about what was read. Refuse, rather than skip or re-read."""
    known = previous.topic_ids if previous else {}
    changed = sorted(t for t, old in known.items() if t in ids and ids[t] != old)
    if changed:
        raise PlanningError(
            f"cannot plan batch {BatchId(seq)} of pipeline {pipeline!r}: topic(s) {', '.join(changed)} were deleted and "
            f"created again since batch {previous.batch_id} (their topic id changed), so the committed offsets belong to "
            "another log. Restore the old topic, or start a new pipeline name to read the new one from its start."
        )


def _replay_ranges(aborted: Plan, limit: int | None, split: Intervention | None = None) -> tuple[tuple[OffsetRange, ...], str | None]:
    """The ranges that replay an aborted batch, and why they are smaller, if they are.

    The same ranges (I6), unless the batch cannot get through as it is: a
    replay that was aborted again is halved (a batch too big or too slow to
    commit in its transaction timeout would otherwise fail forever), a run
    asking for fewer records per partition gets them, and so does an
    operator's split. Safe: nothing of an aborted batch was visible, and the
    next batch starts where this one ends.
    """
    biggest = max((r.end - r.start for r in aborted.ranges), default=0)
    cap, why = limit, None
    if split is not None and (cap is None or split.max_records_per_partition <= cap):
        cap, why = split.max_records_per_partition, split.note()
    if aborted.replay_of is not None and biggest > 1:
        halved = biggest // 2
        if cap is None or halved < cap:  # an operator's split too is halved when it fails again
            cap, why = halved, (f"batch {aborted.batch_id} replayed batch {BatchId(aborted.replay_of)} and was aborted too: "
                                f"halved to {halved} records per partition")
    if cap is None or cap >= biggest:
        return aborted.ranges, None
    why = why or f"the run asked for at most {cap} records per partition (max_records_per_partition)"
    return tuple(OffsetRange(r.topic, r.partition, r.start, min(r.end, r.start + cap)) for r in aborted.ranges), why


def next_plan(
    *,
    pipeline: str,
    previous: Plan | None,
    previous_state: BatchState | None,
    source: OffsetSource,
    config: PlanConfig,
    now_ms: int,
    run_id: str | None = None,
    intervention: Intervention | None = None,
) -> Plan:
    """The plan of batch ``previous.batch_seq + 1`` (or 1). ``previous_state``
    must be terminal: recovery runs first. ``intervention``: an operator's
    split or skip of ``previous``, if it is ABORTED."""
    seq = previous.batch_seq + 1 if previous else 1
    facts: dict[str, Any] = dict(run_id=run_id, start_position=str(config.start),
                                 max_records_per_partition=config.max_records_per_partition,
                                 transform_params=dict(config.transform_params))
    sinks = with_ids(pipeline, config, seq)
    if previous is not None and previous_state is not None and not previous_state.terminal:
        raise PlanningError(
            f"batch {previous.batch_id} of pipeline {pipeline!r} is {previous_state.value}: run recovery "
            "(Coordinator.recover or `onceflow recover`) before planning the next batch"
        )

    ids = dict(source.topic_ids(config.topics))
    _check_same_topics(pipeline, seq, previous, ids)
    facts["topic_ids"] = ids
    if intervention is not None and (previous is None or intervention.batch_seq != previous.batch_seq
                                     or previous_state is not BatchState.ABORTED):
        raise ValueError(f"an intervention on batch {BatchId(intervention.batch_seq)} does not concern the batch before "
                         f"{BatchId(seq)}, or that batch is not aborted")
    skipped = intervention is not None and intervention.action is Action.SKIP
    if intervention is not None:  # what shows that it took effect (the intervention itself is a request)
        facts["intervention"] = intervention.note()
    if previous is not None and previous_state is BatchState.ABORTED and not skipped:
        starts = {TopicPartition(r.topic, r.partition): r.start for r in previous.ranges}
        check_not_lost(f"batch {BatchId(seq)} of pipeline {pipeline!r}", starts, source)
        ranges, why = _replay_ranges(previous, config.max_records_per_partition, intervention)
        # A replay reproduces the aborted batch (I6): its transform parameters too, not this run's.
        facts["transform_params"] = dict(previous.transform_params)
        return Plan(pipeline, seq, ranges, sinks, now_ms, replay_of=previous.batch_seq, replanned=why, **facts)

    current = list(source.partitions(config.topics))
    # Where the previous batch ended: committed, or skipped (its records quarantined).
    committed_ends = {TopicPartition(r.topic, r.partition): r.end for r in previous.ranges} if previous else {}
    gone = sorted(tp for tp in committed_ends if tp not in set(current) and tp.topic in config.topics)
    if gone:
        raise PlanningError(
            f"cannot plan batch {BatchId(seq)} of pipeline {pipeline!r}: partitions read by batch {previous.batch_id} "
            f"no longer exist: {', '.join(f'{t}[{p}]' for t, p in gone)}. A topic was deleted or recreated; "
            "restore it, or start a new pipeline name."
        )
    # A partition added to a topic the pipeline already reads starts at its first
    # record (whatever was written to it before this plan is input); a topic new to
    # the pipeline starts where the spec's start position says.
    read_topics = {tp.topic for tp in committed_ends}
    grown = [tp for tp in current if tp not in committed_ends and tp.topic in read_topics]
    new = [tp for tp in current if tp.topic not in read_topics]
    starts = {tp: committed_ends[tp] for tp in current if tp in committed_ends}
    starts.update(source.earliest_offsets(grown) if grown else {})
    if new:
        if config.start.kind == "earliest":
            starts.update(source.earliest_offsets(new))
        elif config.start.kind == "latest":
            starts.update(source.last_stable_offsets(new))
        else:
            starts.update(source.offsets_for_timestamp(new, int(config.start.timestamp_ms or 0)))
    check_not_lost(f"batch {BatchId(seq)} of pipeline {pipeline!r}", starts, source)
    stable = source.last_stable_offsets(current)
    limit = config.max_records_per_partition
    ranges = []
    for tp in sorted(current):
        start = starts[tp]
        if stable[tp] < start:
            raise PlanningError(
                f"cannot plan batch {BatchId(seq)} of pipeline {pipeline!r}: {tp.topic}[{tp.partition}] ends at offset "
                f"{stable[tp]}, before offset {start} where the previous batch ended. The topic was recreated or "
                "truncated; restore it, or start a new pipeline name."
            )
        end = stable[tp] if limit is None else min(stable[tp], start + limit)
        ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
    # Topics dropped from the configuration keep their position as empty
    # ranges, so adding them back later resumes where they stopped (I1).
    ranges.extend(OffsetRange(t, p, end, end) for (t, p), end in sorted(committed_ends.items()) if t not in config.topics)
    # The input lag when this batch was planned: the UI charts it over time.
    backlog = sum(stable[tp] - starts[tp] for tp in current)
    return Plan(pipeline, seq, tuple(ranges), sinks, now_ms, replay_of=None, backlog=backlog, **facts)
