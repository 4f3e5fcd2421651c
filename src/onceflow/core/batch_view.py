"""What a batch looks like, read from the ledger alone: ``BatchStatus`` (what
the coordinator, ``onceflow status`` and the UI page know of one batch) and
the rows a person reads (newest first, a page at a time). Read-only: nothing
here writes a record or changes a state."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from onceflow.core.batch_id import BatchId
from onceflow.core.planning.interventions import Intervention
from onceflow.core.ledger.ledger import BATCH_EFFECT, BatchLedger
from onceflow.core.ledger.records import Decision, DoneMarker, FailedEffect
from onceflow.core.participant import Vote
from onceflow.core.plan import EXACTLY_ONCE, Plan
from onceflow.core.states import BatchState, derive_state


@dataclass(frozen=True)
class BatchStatus:
    """One batch as ``onceflow status`` shows it. ``timings`` holds epoch ms
    of planned / attempt_claimed / last_vote / decided / done (when known)."""

    pipeline: str
    batch_seq: int
    state: BatchState
    plan: Plan
    attempt: int
    votes: Mapping[str, Vote]
    missing_votes: tuple[str, ...]
    decision: Decision | None
    done: Mapping[str, DoneMarker]
    timings: Mapping[str, int] = field(default_factory=dict)
    intervention: Intervention | None = None  # an aborted batch an operator split or skipped
    # A decided, unfinished batch: the last FAILED answer of each output whose effect is not done yet.
    failed: Mapping[str, FailedEffect] = field(default_factory=dict)

    @property
    def batch_id(self) -> str:
        return str(BatchId(self.batch_seq))


def outputs_of(plan: Plan, configured: Sequence[str]) -> list[str]:
    """The batch's outputs, as its plan names them (configured or not: status reads any batch);
    a plan too old to name them has the ``configured`` ones."""
    return [s.name for s in plan.sinks] if plan.sinks else sorted(configured)


def planned(ledger: BatchLedger, seq: int) -> Plan:
    """The plan of batch ``seq``, or a KeyError that says where it was looked for."""
    plan = ledger.read_plan(seq)
    if plan is None:
        raise KeyError(f"pipeline {ledger.pipeline!r} has no batch {BatchId(seq)} "
                       f"(no {ledger.storage.describe(ledger.plan_key(seq))}); run the plan task first")
    return plan


def describe_batch(ledger: BatchLedger, seq: int, configured: Sequence[str] = ()) -> BatchStatus | None:
    """Everything the ledger knows about batch ``seq``; None for seq 0 (no batch yet)."""
    if seq == 0:
        return None
    plan = planned(ledger, seq)
    attempt, outputs = ledger.latest_attempt(seq), outputs_of(plan, configured)
    votes, missing, last_vote_ms = ledger.read_votes(seq, attempt, outputs)
    decision = ledger.read_decision(seq)
    done = {}
    for effect in [*outputs, BATCH_EFFECT]:
        marker = ledger.read_done(seq, effect) if decision else None
        if marker is not None:
            done[effect] = marker
    state = derive_state(
        has_attempt=attempt > 0,
        all_voted=not missing,
        decision=decision.outcome.value if decision else None,
        done=BATCH_EFFECT in done,
    )
    timings = {"planned": plan.created_at_ms}
    claim = ledger.read_attempt(seq, attempt) if attempt else None
    if claim:
        timings["attempt_claimed"] = claim.claimed_at_ms
    if last_vote_ms:
        timings["last_vote"] = last_vote_ms
    if decision:
        timings["decided"] = decision.decided_at_ms
    if BATCH_EFFECT in done:
        timings["done"] = done[BATCH_EFFECT].done_at_ms
    intervention = ledger.read_intervention(seq) if state is BatchState.ABORTED else None
    failed = {}
    if decision and BATCH_EFFECT not in done:
        notes = {effect: ledger.read_failed(seq, effect) for effect in outputs if effect not in done}
        failed = {effect: note for effect, note in notes.items() if note is not None}
    return BatchStatus(ledger.pipeline, seq, state, plan, attempt, votes, tuple(missing), decision, done, timings,
                       intervention, failed)

# Stages of a batch, as (name, from timing, to timing) of BatchStatus.timings.
STAGES = (
    ("waiting for Spark", "planned", "attempt_claimed"),
    ("pre-commit", "attempt_claimed", "last_vote"),
    ("decision", "last_vote", "decided"),
    ("commit or abort", "decided", "done"),
)


def stage_durations_ms(timings: dict[str, int]) -> dict[str, int]:
    return {name: timings[end] - timings[start] for name, start, end in STAGES if start in timings and end in timings}


def batch_row(status) -> dict[str, Any]:
    """One batch (a ``BatchStatus``) as plain data."""
    decision = status.decision
    interval = status.plan.interval
    return {
        "batch": status.batch_id,
        "batch_seq": status.batch_seq,
        "run_id": status.plan.run_id,
        "interval": None if interval is None else str(interval),  # an interval pipeline's data interval
        "state": status.state.value,
        "records": status.plan.records,
        "backlog": status.plan.backlog,  # input lag when planned
        "ranges": [r.to_dict() for r in status.plan.ranges],
        "replay_of": status.plan.replay_of,
        # A reprocessed interval: the committed batch it replaces, and what that did to each output.
        "replaces": None if status.plan.replaces is None else status.plan.replaces.batch_seq,
        "reprocessed": None if status.plan.replaces is None else dict(status.plan.replaces.outputs),
        "replanned": status.plan.replanned,  # why a replay is smaller than the batch it replays
        # An operator's split or skip of this (aborted) batch, and the one the batch's plan followed.
        "intervention": None if status.intervention is None else status.intervention.to_dict(),
        "follows_intervention": status.plan.intervention,
        # A plan of the old format: run parameters it carried that were not taken as facts.
        "disbelieved": dict(status.plan.disbelieved),
        "attempt": status.attempt,
        # Outputs planned with a weaker guarantee than exactly_once (plans record each output's).
        "guarantees": {s.name: s.guarantee for s in status.plan.sinks if s.guarantee != EXACTLY_ONCE},
        "votes": {name: vote.records for name, vote in status.votes.items()},
        "withheld": {name: vote.withheld for name, vote in status.votes.items() if vote.withheld},
        "missing_votes": list(status.missing_votes),
        "decision": None if decision is None else decision.outcome.value,
        "decided_by": None if decision is None else decision.decided_by,
        "reason": None if decision is None else decision.reason,
        "done": {effect: marker.detail for effect, marker in status.done.items()},
        # Outputs whose commit or abort answered FAILED (the batch waits for a person): why, by whom, when.
        "failed": {effect: {"detail": note.detail, "by": note.failed_by, "at_ms": note.failed_at_ms}
                   for effect, note in status.failed.items()},
        "timings_ms": dict(status.timings),
        "stages_ms": stage_durations_ms(dict(status.timings)),
    }


def batch_rows(coordinator, limit: int = 20, newest: int | None = None, row=batch_row) -> list[dict[str, Any]]:
    """Up to ``limit`` batches from ``newest`` (default: the latest) down, each as
    ``row(status)``; one ``describe`` per batch, never a listing of the ledger."""
    newest = coordinator.latest_seq() if newest is None else newest
    statuses = (coordinator.describe(seq) for seq in range(newest, max(0, newest - limit), -1))
    return [row(status) for status in statuses if status is not None]


def _when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if ms else "-"


def format_rows(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no batches yet"
    lines = [f"{'batch':<11} {'state':<11} {'records':>8} {'attempt':>7}  {'planned (UTC)':<19}  decision"]
    for r in rows:
        ranges = ", ".join(f"{x['topic']}[{x['partition']}] {x['start']}..{x['end']}" for x in r["ranges"])
        decision = f"{r['decision']} ({r['reason']})" if r["decision"] else "-"
        lines.append(
            f"{r['batch']:<11} {r['state']:<11} {r['records']:>8} {r['attempt']:>7}  {_when(r['timings_ms'].get('planned')):<19}  {decision}"
        )
        if r.get("interval"):
            lines.append(f"{'':<11} interval: {r['interval']} (run {r['run_id']})"
                         + (f"; replaces {BatchId(r['replaces'])}: {r['reprocessed']}" if r.get("replaces") else ""))
        lines.append(f"{'':<11} ranges: {ranges}" + (f"; replays {BatchId(r['replay_of'])}" if r["replay_of"] else "")
                     + (f" ({r['replanned']})" if r.get("replanned") else ""))
        if r.get("intervention"):
            i = r["intervention"]
            what = (f"split to {i['max_records_per_partition']} records per partition" if i["action"] == "split"
                    else "skipped; quarantined: " + ", ".join(f"{q['records']} in {q['path']}" for q in i["quarantine"]))
            lines.append(f"{'':<11} {what}, by {i['by']} at {_when(i['at_ms'])}: {i['reason']}")
        if r.get("follows_intervention") and r["follows_intervention"] != r.get("replanned"):
            lines.append(f"{'':<11} follows: {r['follows_intervention']}")
        if r.get("withheld"):
            lines.append(f"{'':<11} withheld (too large for the topic; in _onceflow/<pipeline>/withheld/): "
                         + ", ".join(f"{name} {n}" for name, n in r["withheld"].items()))
        if r.get("guarantees"):
            lines.append(f"{'':<11} guarantees: " + ", ".join(f"{name} {g}" for name, g in r["guarantees"].items())
                         + " (written by the job, without a transaction)")
        step, task = ("commit", "commit") if r["decision"] == "COMMIT" else ("abort", "rollback")
        for effect, f in (r.get("failed") or {}).items():
            lines.append(f"{'':<11} {step} of {effect} FAILED at {_when(f['at_ms'])} ({f['by']}): {f['detail']}. "
                         f"Once fixed, re-run the {task} task or `onceflow recover`")
        if r["votes"] or r["missing_votes"]:
            lines.append(f"{'':<11} votes: {r['votes']}" + (f"; missing {r['missing_votes']}" if r["missing_votes"] else ""))
    return "\n".join(lines)
