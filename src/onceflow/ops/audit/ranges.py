"""Which batches are committed, and whether their ranges tile the input (I1, I8).

Reads the ledger only for *which* plans are committed; tooling, not the
protocol (a full scan of the ledger).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from onceflow.core.batch_view import BatchStatus, LedgerView
from onceflow.core.planning.interventions import Action
from onceflow.core.plan import Plan
from onceflow.core.states import BatchState


def every_batch(view: LedgerView) -> Iterator[BatchStatus]:
    """The status of every batch, oldest first (a full scan: tooling only)."""
    return (view.describe(seq) for seq in range(1, view.latest_seq() + 1))


def accounted_plans(view: LedgerView) -> tuple[list[tuple[Plan, Any]], list[Plan]]:
    """(plan, status) of every committed batch, and the plans of the batches an operator
    skipped (their records are in the quarantine; only skips the next plan followed),
    oldest first: together they tile the input (I1). A full scan: tooling only."""
    statuses = list(every_batch(view))
    committed, skipped = [], []
    for status, following in zip(statuses, [*statuses[1:], None]):
        if status.state is BatchState.COMMITTED:
            committed.append((status.plan, status))
        elif (status.intervention is not None and status.intervention.action is Action.SKIP and following is not None
              and following.plan.intervention == status.intervention.note()):
            skipped.append(status.plan)
    return committed, skipped


def uncommitted_plans(view: LedgerView) -> dict[str, Plan]:
    """The plans of the batches the ledger shows not committed (aborted, or still in flight), by
    batch id: rows an output of a weaker guarantee than exactly_once shows under them were written
    by the job before the batch ended (a full scan)."""
    return {s.plan.batch_id: s.plan for s in every_batch(view) if s.state is not BatchState.COMMITTED}


def committed_plans(view: LedgerView) -> list[tuple[Plan, Any]]:
    """(plan, status) of every committed batch, oldest first (a full scan: tooling only)."""
    return accounted_plans(view)[0]


def replaced_batches(view: LedgerView, committed: Iterable[tuple[Plan, Any]]) -> tuple[set[int], list[str]]:
    """The committed batches that a later committed batch really replaced (a reprocessed
    interval: same interval, same ranges; ``LedgerView.replacement_refusal``), and why each
    other replacement a plan names was not taken. A batch only named stays expected in
    every output: a ledger's word never excuses missing output."""
    replaced, refused = set(), []
    for plan, _ in committed:
        if "replaces" in plan.disbelieved:
            refused.append(f"batch {plan.batch_id}'s plan (old format) carries 'replaces' from its run's parameters "
                           f"({plan.disbelieved['replaces']})")
        if plan.replaces is None:
            continue
        refusal = view.replacement_refusal(plan)
        if refusal is None:
            replaced.add(plan.replaces.batch_seq)
        else:
            refused.append(refusal)
    return replaced, refused


def contiguity_errors(plans: Iterable[Plan]) -> list[str]:
    """I1: per partition, committed ranges follow each other without gap or
    overlap; for an interval pipeline, I8 (tiling): intervals that meet in time
    meet in every partition, and no two overlap anywhere."""
    plans = list(plans)
    if plans and all(p.interval is not None for p in plans):
        return tiling_errors(plans)
    errors = []
    last_end: dict[tuple[str, int], tuple[int, str]] = {}
    for plan in plans:
        for rng in plan.ranges:
            key = (rng.topic, rng.partition)
            if key in last_end and last_end[key][0] != rng.start:
                prev_end, prev_batch = last_end[key]
                kind = "gap" if rng.start > prev_end else "overlap"
                errors.append(
                    f"{kind} in {rng.topic}[{rng.partition}]: batch {prev_batch} ended at {prev_end}, "
                    f"batch {plan.batch_id} starts at {rng.start}"
                )
            if rng.size or key not in last_end:
                last_end[key] = (rng.end, plan.batch_id)
    return errors


def tiling_errors(plans: list[Plan]) -> list[str]:
    """I8 over committed interval batches (any order): per partition, sorted by
    interval, adjacent intervals share their boundary and none overlaps the next."""
    errors = []
    ordered = sorted(plans, key=lambda p: p.interval.start_ms)
    for before, after in zip(ordered, ordered[1:]):
        first, second = before.interval, after.interval
        ends = {(r.topic, r.partition): r.end for r in before.ranges}
        for rng in after.ranges:
            end = ends.get((rng.topic, rng.partition))
            if end is None:
                continue
            if rng.start < end or (first.end_ms == second.start_ms and rng.start != end):
                kind = "overlap" if rng.start < end else "gap"
                errors.append(f"{kind} in {rng.topic}[{rng.partition}]: interval {first} (batch {before.batch_id}) ends at "
                              f"{end}, interval {second} (batch {after.batch_id}) starts at {rng.start}")
    return errors
