"""What a batch looks like, read from the ledger alone. Read-only: nothing here
writes a record or changes a state.

- ``BatchRecords``: one batch's records, each read once, and its state, derived
  from them here and nowhere else (``states.derive_state``).
- ``LedgerView``: a pipeline's ledger as its readers see it (``onceflow status``,
  the UI page, the audit, the input lag); the ``Coordinator`` reads through it too.
- ``BatchStatus``: everything known of one batch, and the rows a person reads
  (newest first, a page at a time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from typing import Any, Mapping, Sequence

from onceflow.core.batch_id import BatchId
from onceflow.core.planning.intervals import replacement_refusal
from onceflow.core.planning.interventions import Intervention
from onceflow.core.ledger.ledger import BATCH_EFFECT, BatchLedger
from onceflow.core.ledger.records import Decision, DecisionOutcome, DoneMarker, FailedEffect
from onceflow.core.ledger.storage import LedgerStorage
from onceflow.core.participant import Vote
from onceflow.core.plan import EXACTLY_ONCE, Plan
from onceflow.core.states import BatchState, derive_state


# How many batches back to look for the newest committed one when no plan names it (two ledger reads each).
MAX_WALK = 50


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


class BatchRecords:
    """The ledger records of batch ``seq``, each read once, when first asked for, and its
    ``state``, derived from them. A decided batch's state costs two reads (the decision,
    the batch done marker); an undecided one's, the plan, the latest attempt and its votes.
    ``plan``: the batch's plan if the caller has it; ``attempt_hint``: where the probe for
    the latest attempt starts (a voter knows its own)."""

    def __init__(self, ledger: BatchLedger, seq: int, configured: Sequence[str] = (), *,
                 plan: Plan | None = None, attempt_hint: int = 0):
        self.ledger = ledger
        self.seq = seq
        self._configured = configured
        self._attempt_hint = attempt_hint
        self._done: dict[str, DoneMarker | None] = {}
        if plan is not None:
            self.plan = plan  # fills the cached_property

    @cached_property
    def plan(self) -> Plan:
        return planned(self.ledger, self.seq)

    @cached_property
    def outputs(self) -> list[str]:
        return outputs_of(self.plan, self._configured)

    @cached_property
    def decision(self) -> Decision | None:
        return self.ledger.read_decision(self.seq)

    @cached_property
    def attempt(self) -> int:
        """The latest attempt claimed (0: none)."""
        return self.ledger.latest_attempt(self.seq, hint=self._attempt_hint)

    @cached_property
    def _votes(self) -> tuple[dict[str, Vote], list[str], int]:
        return self.ledger.read_votes(self.seq, self.attempt, self.outputs)

    @property
    def votes(self) -> dict[str, Vote]:
        """The votes of the latest attempt, by output."""
        return self._votes[0]

    @property
    def missing(self) -> tuple[str, ...]:
        """The outputs without a vote in the latest attempt."""
        return tuple(self._votes[1])

    @property
    def last_vote_ms(self) -> int:
        return self._votes[2]

    def done_marker(self, effect: str) -> DoneMarker | None:
        """The done marker of ``effect`` (an output, or ``BATCH_EFFECT``); there is none before a decision."""
        if effect not in self._done:
            self._done[effect] = self.ledger.read_done(self.seq, effect) if self.decision is not None else None
        return self._done[effect]

    @property
    def done(self) -> dict[str, DoneMarker]:
        """The done markers there are, the batch's own (``BATCH_EFFECT``) last."""
        return {effect: marker for effect in [*self.outputs, BATCH_EFFECT] if (marker := self.done_marker(effect))}

    # -- what ``derive_state`` asks (``states.Records``) --------------------------------
    @property
    def outcome(self) -> str | None:
        return None if self.decision is None else self.decision.outcome.value

    @property
    def finished(self) -> bool:
        return self.done_marker(BATCH_EFFECT) is not None

    @property
    def has_attempt(self) -> bool:
        return self.attempt > 0

    @property
    def all_voted(self) -> bool:
        return not self.missing

    @cached_property
    def state(self) -> BatchState:
        return derive_state(self)

    def status(self) -> BatchStatus:
        """Everything the ledger knows of the batch: these records, and when each was written."""
        state, plan, decision, done = self.state, self.plan, self.decision, self.done
        timings = {"planned": plan.created_at_ms}
        claim = self.ledger.read_attempt(self.seq, self.attempt) if self.attempt else None
        if claim:
            timings["attempt_claimed"] = claim.claimed_at_ms
        if self.last_vote_ms:
            timings["last_vote"] = self.last_vote_ms
        if decision:
            timings["decided"] = decision.decided_at_ms
        if BATCH_EFFECT in done:
            timings["done"] = done[BATCH_EFFECT].done_at_ms
        intervention = self.ledger.read_intervention(self.seq) if state is BatchState.ABORTED else None
        failed = {}
        if decision and BATCH_EFFECT not in done:
            notes = {effect: self.ledger.read_failed(self.seq, effect) for effect in self.outputs if effect not in done}
            failed = {effect: note for effect, note in notes.items() if note is not None}
        return BatchStatus(self.ledger.pipeline, self.seq, state, plan, self.attempt, self.votes, self.missing,
                           decision, done, timings, intervention, failed)


class LedgerView:
    """One pipeline's ledger, read only: nothing here writes a record, and it needs no
    participant (nor a sink's client). ``configured``: the outputs of a plan too old to
    name its own (a spec's sinks)."""

    def __init__(self, storage: LedgerStorage, pipeline: str, configured: Sequence[str] = ()):
        self.ledger = BatchLedger(storage, pipeline)
        self.pipeline = pipeline
        self.configured = sorted(configured)

    def latest_seq(self) -> int:
        """Newest planned batch (0: none). Constant storage requests (head hint + probe)."""
        return self.ledger.latest_seq()

    def plan(self, seq: int) -> Plan:
        """The plan of batch ``seq`` (Spark driver: what to read, which ids to use)."""
        return planned(self.ledger, seq)

    def batch(self, seq: int, *, plan: Plan | None = None, attempt_hint: int = 0) -> BatchRecords:
        """Batch ``seq``'s records, read as they are asked for, and its state."""
        return BatchRecords(self.ledger, seq, self.configured, plan=plan, attempt_hint=attempt_hint)

    def describe(self, seq: int | None = None) -> BatchStatus | None:
        """Everything known about batch ``seq`` (default: the latest); None before the first plan."""
        seq = self.latest_seq() if seq is None else seq
        return self.batch(seq).status() if seq else None

    def is_committed(self, seq: int) -> bool:
        """Is batch ``seq`` COMMITTED? Two reads when it is decided."""
        return self.batch(seq).state is BatchState.COMMITTED

    def newest_committed_seq(self, latest: int | None = None) -> int:
        """The newest COMMITTED batch at or below ``latest`` (default: the latest; 0: none): ``latest``
        itself, or the one below it (``committed_below``)."""
        latest = self.latest_seq() if latest is None else latest
        if not latest:
            return 0
        records = self.batch(latest)
        return latest if records.state is BatchState.COMMITTED else self.committed_below(records.plan)

    def committed_below(self, plan: Plan) -> int:
        """The newest COMMITTED batch below ``plan``'s (0: none). An offsets plan names it
        (``Plan.committed_before``): no read. Otherwise (an interval batch, a plan before that fact)
        a walk down, at most ``MAX_WALK`` batches and never below the head's hint, which names it
        when the walk gives up."""
        if plan.committed_before is not None:
            return plan.committed_before
        below = plan.batch_seq - 1
        head = self.ledger.read_head()
        hint = head.last_committed_seq if head else 0
        floor = max(hint, below - MAX_WALK, 1)
        return next((seq for seq in range(below, floor - 1, -1) if self.is_committed(seq)), hint)

    def committed_at_ms(self, seq: int) -> int | None:
        """When batch ``seq``, a committed one, was finished (its batch done marker: one read), or None."""
        marker = self.ledger.read_done(seq, BATCH_EFFECT) if seq else None
        return marker.done_at_ms if marker and marker.outcome is DecisionOutcome.COMMIT else None

    def replacement_refusal(self, plan: Plan) -> str | None:
        """Why ``plan`` may not replace the committed batch it names, or None (``intervals.replacement_refusal``)."""
        if plan.replaces is None:
            return None
        seq = plan.replaces.batch_seq
        replaced = self.ledger.read_plan(seq) if 0 < seq < plan.batch_seq else None
        return replacement_refusal(plan, replaced, replaced is not None and self.is_committed(seq))

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


def batch_rows(view: LedgerView, limit: int = 20, newest: int | None = None, row=batch_row) -> list[dict[str, Any]]:
    """Up to ``limit`` batches from ``newest`` (default: the latest) down, each as
    ``row(status)``; one ``describe`` per batch, never a listing of the ledger."""
    newest = view.latest_seq() if newest is None else newest
    statuses = (view.describe(seq) for seq in range(newest, max(0, newest - limit), -1))
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
