"""The plan task of an interval pipeline: bind a DAG run to the batch of its data interval.

``intervals`` has the rules (boundaries, closing, tiling); this
module applies them over the ledger and the coordinator, and follows the
rules it shares with the offsets planner (``reruns``). One call per plan
task, in this order::

    1. the interval's latest batch, if it has one:
       - undecided and planned by this run: a retry of this plan task, return it (I6);
       - otherwise finish it first (recovery: commit or presumed abort);
       - COMMITTED: the interval is done, the run has nothing to do, unless
         it asks to reprocess it: then the next batch reads the same ranges
         and *replaces* it (each output says how: ``SinkKind.reprocess``);
       - ABORTED: the next batch replays its exact ranges (I6)
    2. else its two boundaries, each read from the ledger or resolved and
       recorded once (the end first, so that the start is held below it)
    3. the next free seq whose slot is free (at most batches_in_flight at once)
       and whose transactional ids are free, the plan
    4. the interval's index record naming that batch (create-if-absent: of two
       runs planning one interval at once, the loser aborts its own batch)

Batches of different intervals never touch each other: each has its own
attempts, votes and decision (per-batch fencing), and Kafka transactional ids
no batch in flight shares (``sinks.kafka.ids``: batch ``seq`` is planned only
once ``seq - TXN_ID_POOL``, which may share them, is finished); its slot
(``intervals.slot_of``) only bounds how many run at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Callable, Mapping

from onceflow.core.batch_id import BatchId
from onceflow.core.errors import ConcurrentPlanError
from onceflow.core.plan import TXN_ID_POOL, Plan, Replacement
from onceflow.core.planning.config import PlanConfig, with_ids
from onceflow.core.planning.intervals import (
    Interval,
    IntervalBatch,
    SlotBusy,
    interval_plan,
    iso,
    resolve_boundary,
    slot_of,
)
from onceflow.core.planning.reruns import is_retry, transform_params
from onceflow.core.planning.source import OffsetSource, PlanningError, TopicPartition, check_not_lost
from onceflow.core.states import BatchState

if TYPE_CHECKING:  # the coordinator plans through this package: planning never imports it
    from onceflow.core.coordinator import Coordinator

log = logging.getLogger(__name__)

# An undecided batch that no interval names (its plan task died between its two
# writes) is presumed aborted once this old, to free its slot.
ORPHAN_AFTER_MS = 10 * 60 * 1000


@dataclass(frozen=True)
class IntervalPlanned:
    """What the plan task of an interval run does next."""

    plan: Plan
    # The interval was committed before this run (a cleared or re-run run): nothing to do.
    already_committed: bool = False


class IntervalPlanner:
    def __init__(
        self,
        coordinator: Coordinator,
        config: PlanConfig,
        *,
        grace_ms: int,
        pool: int,
        clock: Callable[[], int] | None = None,
    ):
        self.coordinator = coordinator
        self.ledger = coordinator.ledger
        self.pipeline = coordinator.pipeline
        self.config = config
        self.grace_ms = grace_ms
        self.pool = pool
        self._clock = clock or (lambda: int(time.time() * 1000))

    def plan(self, source: OffsetSource, interval: Interval, run_id: str,
             reprocess: Callable[[], Mapping[str, str]] | None = None) -> IntervalPlanned:
        """``reprocess``: given when the run asks to reprocess a committed interval;
        returns what that does to each output, or raises ``ReprocessRefused``."""
        index = self.ledger.latest_interval_index(interval)
        previous, replay_of, replaces = None, None, None
        if index:
            seq = self.ledger.read_interval_batch(interval, index).batch_seq
            latest = self.coordinator.plan(seq)
            if is_retry(latest, run_id, self.ledger):
                return IntervalPlanned(latest)
            status = self.coordinator.recover(seq)
            if status.state is BatchState.COMMITTED:
                if reprocess is None:
                    return IntervalPlanned(status.plan, already_committed=True)
                previous, replaces = latest, Replacement(seq, dict(reprocess()))
            else:
                # Replays the same ranges (I6), and what it replaced, if it was a justified replacement.
                justified = self.coordinator.replacement_refusal(latest) is None
                previous, replay_of, replaces = latest, seq, latest.replaces if justified else None
            check_not_lost(f"interval {interval} of pipeline {self.pipeline!r}",
                           {TopicPartition(r.topic, r.partition): r.start for r in previous.ranges if r.size}, source)
        else:
            self._check_new(interval)
            partitions = list(source.partitions(self.config.topics))
            end = self._boundary(interval.end_ms, partitions, source, interval)
            start = self._boundary(interval.start_ms, partitions, source, interval)
            self._check_boundary_order(interval)

        def make_plan(seq: int) -> Plan:
            slot = slot_of(seq, self.pool)
            params = transform_params(self.config.transform_params, previous if replay_of is not None else None)
            facts = dict(run_id=run_id, slot=slot, batches_in_flight=self.pool, transform_params=params)
            sinks = partial(with_ids, self.pipeline, self.config, seq)  # the batch's records -> its sinks
            if previous is None:
                return interval_plan(pipeline=self.pipeline, seq=seq, interval=interval, start=start, end=end,
                                     partitions=partitions, source=source, sinks=sinks, now_ms=self._clock(), **facts)
            return Plan(self.pipeline, seq, previous.ranges, sinks(previous.records), self._clock(), replay_of=replay_of,
                        interval=interval, replaces=replaces, **facts)

        plan = self.coordinator.plan_new_batch(make_plan, before=self._check_slot_free)
        created, winner = self.ledger.create_interval_batch(IntervalBatch(interval, index + 1, plan.batch_seq))
        if not created:
            self.coordinator.rollback(plan.batch_seq, f"interval {interval} was planned at the same time as batch "
                                      f"{BatchId(winner.batch_seq)}, which won; this batch is void")
            raise ConcurrentPlanError(
                f"interval {interval} of pipeline {self.pipeline!r} was planned at the same time by another run (batch "
                f"{BatchId(winner.batch_seq)}); this run's batch {plan.batch_id} was aborted unread. One DAG run per "
                "interval: the other run processes it."
            )
        return IntervalPlanned(plan)

    def _check_new(self, interval: Interval) -> None:
        """A first batch for ``interval``: the ledger must hold interval batches only,
        and no other interval overlapping it (a changed schedule), which would read
        some records twice."""
        newest = self.coordinator.latest_seq()
        if newest and self.coordinator.plan(newest).interval is None:
            raise PlanningError(
                f"cannot plan interval {interval} of pipeline {self.pipeline!r}: its batches so far read the next offsets "
                f"(batch {BatchId(newest)}), not data intervals, and switching would re-read or skip records. Keep "
                "batches='offsets', or start a new pipeline name for interval batches."
            )
        overlapping = sorted(other for other in self.ledger.planned_intervals()
                             if other != interval and other.start_ms < interval.end_ms and interval.start_ms < other.end_ms)
        if overlapping:
            raise PlanningError(
                f"cannot plan interval {interval} of pipeline {self.pipeline!r}: it overlaps interval(s) "
                f"{', '.join(map(str, overlapping))} planned before, so records would be read twice. The DAG's schedule "
                "changed its intervals: keep them aligned with the old ones (or start a new pipeline name)."
            )

    def _check_boundary_order(self, interval: Interval) -> None:
        """Boundaries recorded around ``interval`` must not decrease. Two plan tasks
        resolving non-adjacent boundaries at the same moment while late records
        arrive could record them out of order (each checks before it writes):
        whichever looks after both are written refuses, rather than read twice."""
        ordered = self.ledger.boundaries_around(interval.start_ms, interval.end_ms)
        for before, after in zip(ordered, ordered[1:]):
            inverted = sorted(tp for tp, offset in before.offsets.items() if offset > after.offset(tp))
            if inverted:
                raise PlanningError(
                    f"cannot plan interval {interval} of pipeline {self.pipeline!r}: the boundaries recorded at "
                    f"{iso(before.instant_ms)} and {iso(after.instant_ms)} are out of order in "
                    f"{', '.join(f'{tp.topic}[{tp.partition}] ({before.offsets[tp]} > {after.offset(tp)})' for tp in inverted)}: "
                    "they were resolved at the same moment while records stamped before them were still arriving. "
                    "Nothing was read. Intervals between them cannot be planned without reading records twice; "
                    "see docs/intervals.md (boundaries out of order) for the way out."
                )

    def _boundary(self, instant_ms: int, partitions, source: OffsetSource, interval: Interval):
        recorded = self.ledger.read_boundary(instant_ms)
        if recorded is not None:
            return recorded
        resolved = resolve_boundary(
            instant_ms, partitions, source, later=self.ledger.boundary_after(instant_ms), now_ms=self._clock(),
            grace_ms=self.grace_ms, what=f"interval {interval} of pipeline {self.pipeline!r}",
        )
        _, winner = self.ledger.create_boundary(resolved)  # a concurrent plan's equal or earlier answer wins
        log.info("boundary at %s of %s: %s", iso(instant_ms), self.pipeline,
                 ", ".join(f"{tp.topic}[{tp.partition}]={o} ({winner.how.get(tp)})" for tp, o in sorted(winner.offsets.items())))
        return winner

    def _check_slot_free(self, seq: int) -> None:
        """Batch ``seq`` may take its slot only when every earlier batch in that slot is finished,
        and its transactional ids only when batch ``seq - TXN_ID_POOL``, which may share them, is.

        Those in its slot are ``seq - pool``, or others when batches_in_flight changed: every batch
        of the last ``max(pool, their pool)`` whose recorded slot is this one counts."""
        slot = slot_of(seq, self.pool)
        reach, other = self.pool, seq
        while (other := other - 1) >= max(1, seq - reach):
            plan = self.coordinator.plan(other)
            reach = max(reach, plan.batches_in_flight or 0)
            if plan.slot == slot:
                self._finish_or_wait(seq, plan, f"would take slot {slot} of batches_in_flight",
                                     f"More than batches_in_flight={self.pool} batches are in flight")
        holder = seq - TXN_ID_POOL
        mine = {i for sink in with_ids(self.pipeline, self.config, seq) for i in sink.transactional_ids}
        if holder >= 1 and mine:  # a pipeline without transactional ids reads no plan for them
            plan = self.coordinator.plan(holder)
            if mine & {i for sink in plan.sinks for i in sink.transactional_ids}:
                self._finish_or_wait(seq, plan, "would take its Kafka transactional ids",
                                     f"Batches {TXN_ID_POOL} apart share them (onceflow.core.plan.TXN_ID_POOL), so at "
                                     f"most {TXN_ID_POOL} are in flight whatever batches_in_flight says")

    def _finish_or_wait(self, seq: int, plan: Plan, what: str, why: str) -> None:
        """Batch ``plan`` holds what batch ``seq`` ``what`` takes: finish it if anyone may, else wait for it."""
        other = plan.batch_seq
        status = self.coordinator.describe(other)
        if status.state.terminal:
            return
        if status.decision is not None:  # COMMITTING or ABORTING: finishing it is safe for anyone
            self.coordinator.recover(other)
            return
        held_by = plan.interval
        named = held_by is not None and any(
            (record := self.ledger.read_interval_batch(held_by, n)) is not None and record.batch_seq == other
            for n in range(1, self.ledger.latest_interval_index(held_by) + 1)
        )
        if not named and self._clock() - plan.created_at_ms > ORPHAN_AFTER_MS:
            log.warning("batch %s of %s was planned but never bound to its interval (its plan task died): "
                        "presumed aborted", BatchId(other), self.pipeline)
            self.coordinator.recover(other)
            return
        raise SlotBusy(
            f"batch {BatchId(seq)} of pipeline {self.pipeline!r} {what}, "
            f"still held by batch {BatchId(other)} (interval {held_by}, run {plan.run_id!r}), which "
            f"is {status.state.value}: waiting for it to finish. {why}; if that run is gone, re-run it, or finish "
            "the batch with `onceflow recover "
            f"--pipeline {self.pipeline} --batch {other}`."
        )


def committed_batch(coordinator: Coordinator, interval: Interval) -> Plan | None:
    """The newest committed batch of ``interval`` (a replacement in flight does not hide the one it replaces)."""
    ledger = coordinator.ledger
    for index in range(ledger.latest_interval_index(interval), 0, -1):
        seq = ledger.read_interval_batch(interval, index).batch_seq
        if coordinator.is_committed(seq):
            return coordinator.plan(seq)
    return None


def committed_prefix(coordinator: Coordinator, *, advance_hint: bool = True) -> Plan | None:
    """The plan of the last interval of the committed prefix: the run of committed
    intervals, each starting where the one before it ends, from the earliest
    interval planned. Its range ends are the offsets below which every record is
    committed (the consumer-group mirror and the input lag use them); None
    before the earliest interval is committed.

    Lists the intervals once and walks from the ledger's prefix hint, which a
    committing task moves forward (``advance_hint``)."""
    ledger = coordinator.ledger
    by_start: dict[int, list[Interval]] = {}
    for interval in ledger.planned_intervals():
        by_start.setdefault(interval.start_ms, []).append(interval)
    if not by_start:
        return None
    hint = ledger.read_prefix_hint()
    at, last = (hint.end_ms, coordinator.plan(hint.batch_seq)) if hint is not None else (min(by_start), None)
    while at in by_start:
        done = next((p for interval in sorted(by_start[at]) if (p := committed_batch(coordinator, interval))), None)
        if done is None:
            break
        last, at = done, done.interval.end_ms
    if advance_hint and last is not None and (hint is None or last.interval.end_ms > hint.end_ms):
        ledger.write_prefix_hint(last.batch_seq, last.interval.end_ms)
    return last
