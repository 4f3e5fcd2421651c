"""The offsets planner: which offsets the next batch reads (I1, I6).

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
  ended, as a commit would (``interventions``); a retry of the same run and a
  replay's transform parameters follow the rules both planners share (``reruns``);
- a partition never seen before starts at the configured start position
  (earliest, latest, or the first offset at or after a timestamp);
- a range ends at ``min(last stable offset, start + max_records_per_partition)``;
- a start below the earliest offset still in the log means records were
  deleted by retention before being read: ``OffsetsLostError``, never skipped.
"""

from __future__ import annotations

from typing import Any, Mapping

from onceflow.core.batch_id import BatchId
from onceflow.core.plan import OffsetRange, Plan
from onceflow.core.planning.config import PlanConfig, with_ids
from onceflow.core.planning.interventions import Action, Intervention
from onceflow.core.planning.reruns import transform_params
from onceflow.core.planning.source import OffsetSource, PlanningError, TopicPartition, check_not_lost
from onceflow.core.states import BatchState


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


def committed_before(previous: Plan | None, previous_state: BatchState | None) -> int | None:
    """The newest committed batch before the next one: ``previous`` if it committed, else the one
    its own plan names (None if that plan predates the fact). Readers take it from the plan instead
    of walking down past aborted batches."""
    if previous is None:
        return 0
    return previous.batch_seq if previous_state is BatchState.COMMITTED else previous.committed_before


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
                                 transform_params=transform_params(config.transform_params, None))
    if previous is not None and previous_state is not None and not previous_state.terminal:
        raise PlanningError(
            f"batch {previous.batch_id} of pipeline {pipeline!r} is {previous_state.value}: run recovery "
            "(Coordinator.recover or `onceflow recover`) before planning the next batch"
        )

    facts["committed_before"] = committed_before(previous, previous_state)
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
        facts["transform_params"] = transform_params(config.transform_params, previous)
        sinks = with_ids(pipeline, config, seq, records=sum(r.size for r in ranges))
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
    sinks = with_ids(pipeline, config, seq, records=sum(r.size for r in ranges))
    return Plan(pipeline, seq, tuple(ranges), sinks, now_ms, replay_of=None, backlog=backlog, **facts)
