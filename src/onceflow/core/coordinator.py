"""The two-phase-commit coordinator of one pipeline.

Call sequence of one batch (docs/protocol.md, "One batch"), and where each step runs::

    plan_next(source, config, run_id)  Airflow plan task      recover(), then write plan.json
    begin_attempt(seq)                 Spark driver, job start claim attempts/<n>.json
    record_vote(seq, attempt, vote)    Spark driver (or the data source's commit)
    commit(seq)                        Airflow commit task    verify votes, write COMMIT,
                                                              apply each effect, mark done
    rollback(seq, reason)              Airflow rollback task  write ABORT, abort each effect
    recover()                          any of the above, first: finish the latest batch
    intervene(intervention)            an operator (CLI)      split or skip the latest batch,
                                                              aborted; the next plan follows it

Every step is idempotent and may be re-run after a crash at any point:
decisions are created once (I2) and followed by every later caller, effects
are marked done one by one and re-applied (participants' commit/abort are
idempotent by contract) until the batch done marker exists (I3). Fencing
(I5): attempts are numbered by create-if-absent; a vote is accepted only for
the latest attempt and only before the decision; a COMMIT names the attempt
and embeds its votes, and nothing else is ever committed.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import replace
from typing import Callable, Mapping, Sequence

from onceflow.core import faults
from onceflow.core.ledger.ledger import BATCH_EFFECT
from onceflow.core.ledger.records import Decision, DecisionOutcome, DoneMarker, FailedEffect, Head
from onceflow.core.ledger.storage import LedgerStorage
from onceflow.core.batch_id import BatchId
from onceflow.core.batch_view import BatchStatus, LedgerView, outputs_of
from onceflow.core.errors import (
    AbortFailed,
    BatchAborted,
    CommitFailed,
    ConcurrentPlanError,
    InterventionRefused,
    PlanningError,
    RetryLater,
    StaleAttempt,
)
from onceflow.core.planning.interventions import Intervention
from onceflow.core.participant import Participant, Result, Vote
from onceflow.core.plan import Plan
from onceflow.core.reactions import REACTIONS, Reaction, Step
from onceflow.core.planning.config import PlanConfig
from onceflow.core.planning.offsets import next_plan
from onceflow.core.planning.reruns import is_retry
from onceflow.core.planning.source import OffsetSource
from onceflow.core.states import (
    RECOVERY,
    TRANSITIONS,
    BatchState,
    IllegalTransition,
    check_transition,
)
from onceflow.config.settings import ConfigurationError

log = logging.getLogger(__name__)

COMMIT_EFFECT_BEFORE = faults.declare("commit.effect.before", "before participant.commit is called")
COMMIT_EFFECT_AFTER = faults.declare("commit.effect.after", "after participant.commit, before its done marker")
COMMIT_BETWEEN_EFFECTS = faults.declare("commit.between_effects", "after one effect's done marker, before the next effect")
ABORT_EFFECT_BEFORE = faults.declare("abort.effect.before", "before participant.abort is called")
ABORT_EFFECT_AFTER = faults.declare("abort.effect.after", "after participant.abort, before its done marker")
PLAN_AFTER_RECOVERY = faults.declare("plan.after_recovery", "after recovery finished, before the next plan is written")


def _default_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def write_vote(view: LedgerView, vote: Vote, clock: Callable[[], int] = wall_clock_ms) -> None:
    """Record ``vote`` in ``view``'s ledger: what a vote needs is the ledger, not the participants (the
    Spark worker that records it has none). Idempotent for the same vote. A zombie's vote (an older
    attempt, or after the decision) raises StaleAttempt and is never counted; it can never replace
    a vote already recorded."""
    seq, attempt = vote.batch_seq, vote.attempt
    where = f"batch {BatchId(seq)} of pipeline {view.pipeline!r}"
    plan = view.plan(seq)
    sinks = outputs_of(plan, view.configured)
    if vote.participant not in sinks:
        raise ValueError(f"{where} has no sink {vote.participant!r} (sinks: {sinks})")
    records = view.batch(seq, plan=plan, attempt_hint=attempt)
    # A vote keeps the batch PREPARING or, as the last one, makes it PREPARED: both need an undecided batch.
    check_transition(records.state, BatchState.PREPARING, batch=str(BatchId(seq)), pipeline=view.pipeline,
                     step=f"the vote of {vote.participant!r} in attempt {attempt} (ignored)", refusal=StaleAttempt)
    latest = records.attempt
    if latest != attempt:
        raise StaleAttempt(
            f"{where}: attempt {attempt} of {vote.participant!r} is not the latest (attempt {latest} started); "
            "its vote is ignored and its output will be cleaned up"
            if latest > attempt
            else f"{where}: attempt {attempt} was never started (begin_attempt); vote refused"
        )
    created, winner = view.ledger.create_vote(vote, clock())
    if not created and winner.vote != vote:
        raise StaleAttempt(
            f"{where}: attempt {attempt} already has a different vote from {vote.participant!r} "
            f"({view.ledger.storage.describe(view.ledger.vote_key(seq, attempt, vote.participant))}); "
            "the first one counts. Start a new attempt to vote again."
        )


NOTE_CHARS = 500  # of what an output said: a done marker is a small record, read by every status and page


def effect_note(result: Result) -> str:
    """What a done marker keeps of an output's answer: its outcome and what it said (an Iceberg commit names
    the snapshot it made), which status and the page show."""
    if not result.detail:
        return result.outcome.value
    said = result.detail if len(result.detail) <= NOTE_CHARS else result.detail[:NOTE_CHARS - 1] + "…"
    return f"{result.outcome.value}: {said}"


class Coordinator(LedgerView):
    """Drives the batches of one pipeline through the ledger. It reads as the
    ``LedgerView`` does: each step gates on ``batch(seq).state``.

    ``participants`` maps sink name -> Participant; every sink of a plan
    needs one. ``identity`` names this process in decisions and markers
    (e.g. the Airflow task instance); ``clock`` returns epoch ms.
    """

    def __init__(
        self,
        storage: LedgerStorage,
        pipeline: str,
        participants: Mapping[str, Participant],
        *,
        identity: str | None = None,
        clock: Callable[[], int] | None = None,
        on_finished: Callable[[int], None] | None = None,
    ):
        super().__init__(storage, pipeline, configured=list(participants))
        self.participants = dict(participants)
        self.identity = identity or _default_identity()
        self._clock = clock or wall_clock_ms
        # Called with the batch's seq by whichever call finished it (wrote its done
        # marker): once per batch, whoever finishes it (commit, rollback, recovery).
        self.on_finished = on_finished

    # -- reading (the rest is LedgerView's) --------------------------------------
    def _expected(self, plan: Plan) -> list[str]:
        return outputs_of(plan, self.configured)

    def _require_configured(self, plan: Plan) -> None:
        """Verifying or committing needs every output's participant: fail fast, naming the fix."""
        missing = [n for n in self._expected(plan) if n not in self.participants]
        if missing:
            raise ConfigurationError(
                f"batch {plan.batch_id} of pipeline {self.pipeline!r} has sinks {missing} in its plan "
                f"({self.ledger.storage.describe(self.ledger.plan_key(plan.batch_seq))}) but no participant of that "
                f"name is configured (configured: {sorted(self.participants)}). Configure them to commit it; without "
                "them the next run's recovery aborts it, leaving what those sinks pre-committed uncleaned."
            )

    # -- planning --------------------------------------------------------------
    def plan_next(self, source: OffsetSource, config: PlanConfig, *, run_id: str | None = None) -> Plan:
        """Airflow plan task. Finishes the previous batch (recover), then writes
        the next plan. Idempotent per ``run_id``: a retry of the same run's plan
        task gets the plan it wrote before, as long as that batch is undecided."""
        sink_names = sorted(s.name for s in config.sinks)
        if sink_names != sorted(self.participants):
            raise ConfigurationError(
                f"pipeline {self.pipeline!r}: the plan's sinks {sink_names} and the configured participants "
                f"{sorted(self.participants)} differ; give every sink exactly one participant of the same name"
            )
        latest = self.latest_seq()
        previous = self.ledger.read_plan(latest) if latest else None
        if previous is not None and previous.interval is not None:
            raise PlanningError(
                f"cannot plan the next offsets of pipeline {self.pipeline!r}: its batches read data intervals (batch "
                f"{previous.batch_id}: {previous.interval}), and switching would re-read or skip records. "
                "Keep batches='interval', or start a new pipeline name."
            )
        state = None
        if previous is not None:
            if is_retry(previous, run_id, self.ledger):
                return previous
            state = self.recover().state
        faults.fault_point(PLAN_AFTER_RECOVERY)
        plan = next_plan(
            pipeline=self.pipeline,
            previous=previous,
            previous_state=state,
            source=source,
            config=config,
            now_ms=self._clock(),
            run_id=run_id,
            intervention=self.ledger.read_intervention(latest) if state is BatchState.ABORTED else None,
        )
        created, winner = self.ledger.create_plan(plan)
        if not created and (run_id is None or winner.run_id != run_id):
            raise ConcurrentPlanError(
                f"batch {plan.batch_id} of pipeline {self.pipeline!r} was planned concurrently by another run "
                f"({winner.run_id!r}, not {run_id!r}). Run one DAG run at a time (max_active_runs=1); "
                "this run must not process the batch."
            )
        self._update_head(winner.batch_seq, committed=latest if state is BatchState.COMMITTED else None)
        return winner

    def plan_new_batch(self, make_plan: Callable[[int], Plan], before: Callable[[int], None] | None = None) -> Plan:
        """Write ``make_plan(seq)`` at the next free seq and return it (interval
        pipelines, whose batches are planned side by side: a plan that loses the
        race for a seq is made again for the next one). ``before(seq)`` runs
        first and may refuse the seq by raising."""
        while True:
            seq = self.latest_seq() + 1
            if before is not None:
                before(seq)
            plan = make_plan(seq)
            created, _ = self.ledger.create_plan(plan)
            if created:
                self._update_head(seq)
                return plan

    def _update_head(self, latest: int, committed: int | None = None) -> None:
        old = self.ledger.read_head()
        head = Head(
            latest_seq=max(latest, old.latest_seq if old else 0),
            last_committed_seq=max(committed or 0, old.last_committed_seq if old else 0),
            updated_at_ms=self._clock(),
        )
        if head != old:
            self.ledger.write_head(head)

    def _check(self, seq: int, current: BatchState, target: BatchState, step: str,
               refusal: type[IllegalTransition] = IllegalTransition) -> None:
        """The one gate of every state change: ``TRANSITIONS`` allows it, or ``refusal`` is raised."""
        check_transition(current, target, batch=str(BatchId(seq)), pipeline=self.pipeline, step=step, refusal=refusal)

    # -- prepare phase -----------------------------------------------------------
    def begin_attempt(self, seq: int) -> int:
        """Spark driver, at job start: claim the next attempt number of batch
        ``seq``. Refused once the batch is decided. Each call claims a new
        attempt, which fences every older one (their votes stop counting)."""
        self._check(seq, self.batch(seq).state, BatchState.PREPARING, "begin_attempt")
        claim = self.ledger.claim_attempt(seq, self.identity, self._clock())
        # A decision written while we claimed fixed an older attempt: this one is void.
        if self.ledger.read_decision(seq) is not None:
            raise IllegalTransition(
                f"batch {BatchId(seq)} of pipeline {self.pipeline!r} was decided while attempt {claim.attempt} started; "
                "this attempt must not run. Nothing to do: the decision stands."
            )
        return claim.attempt

    def record_vote(self, seq: int, attempt: int, vote: Vote) -> None:
        """Spark driver (or the data source's commit), after pre-commit: record ``vote`` (``write_vote``)."""
        if (vote.batch_seq, vote.attempt) != (seq, attempt):
            raise ValueError(f"vote is for batch {vote.batch_seq} attempt {vote.attempt}, recorded as {seq} / {attempt}")
        write_vote(self, vote, self._clock)

    # -- decision ----------------------------------------------------------------
    def _decide(self, seq: int, state: BatchState, outcome: DecisionOutcome, attempt: int, votes: Mapping[str, Vote], reason: str) -> Decision:
        target = BatchState.COMMITTING if outcome is DecisionOutcome.COMMIT else BatchState.ABORTING
        self._check(seq, state, target, f"decide {outcome.value}")
        mine = Decision(seq, outcome, attempt, dict(votes), self.identity, self._clock(), reason)
        created, winner = self.ledger.create_decision(mine)
        if not created and winner != mine:
            log.warning(
                "batch %s of %s: %s lost the race to decide; following %s by %s (%s)",
                BatchId(seq), self.pipeline, outcome.value, winner.outcome.value, winner.decided_by, winner.reason,
            )
        return winner

    def _react(self, step: Step, plan: Plan, name: str, result: Result) -> bool:
        """Do what ``REACTIONS`` says for ``name``'s answer to ``step``: True to go on, False
        for a refused vote; a retry or a stop raises."""
        reaction = REACTIONS[step, result.outcome]
        if reaction is Reaction.PROCEED or reaction is Reaction.REFUSE_VOTE:
            return reaction is Reaction.PROCEED
        where = f"batch {plan.batch_id} of pipeline {self.pipeline!r}, participant {name!r}"
        if reaction is Reaction.RETRY:
            raise RetryLater(f"{step.value} of {where} must be retried: {result.detail}. "
                             "What the ledger holds stands; retry the task.")
        self._note_failed(plan, name, step, result)
        if step is Step.COMMIT:
            raise CommitFailed(
                f"commit of {where} FAILED after COMMIT was decided: {result.detail}. The batch is not fully "
                "committed and will not be reported as such (I7). Inspect it with `onceflow status`; fix the sink, then "
                "re-run the commit task (it redoes only what is missing)."
            )
        raise AbortFailed(
            f"abort of {where} FAILED: {result.detail}. The batch stays ABORTING; fix the sink and re-run the "
            "rollback task (it redoes only what is missing)."
        )

    def _note_failed(self, plan: Plan, name: str, step: Step, result: Result) -> None:
        """Keep a participant's FAILED answer where ``onceflow status`` and the page show it. Only a note:
        a ledger that cannot take it must not hide the failure itself."""
        outcome = DecisionOutcome.COMMIT if step is Step.COMMIT else DecisionOutcome.ABORT
        note = FailedEffect(plan.batch_seq, name, outcome, result.detail, self.identity, self._clock())
        try:
            self.ledger.write_failed(note)
        except Exception:
            log.warning("batch %s of %s: the failure of %s was not noted in the ledger", plan.batch_id, self.pipeline,
                        name, exc_info=True)

    def _apply(self, plan: Plan, decision: Decision) -> None:
        """Apply the recorded decision, whichever it is (commit, rollback and recovery all end here)."""
        if decision.outcome is DecisionOutcome.COMMIT:
            self._apply_commit(plan, decision)
        else:
            self._apply_abort(plan, decision)

    # -- commit phase ------------------------------------------------------------
    def commit(self, seq: int) -> BatchStatus:
        """Airflow commit task. Checks every expected vote of the latest attempt
        (participant.verify), writes COMMIT, applies each vote and marks the
        batch done. Idempotent: re-running redoes only what is missing.

        Raises BatchAborted if the batch ends aborted instead (a vote missing
        or invalid, or a racing ABORT won), RetryLater on transient trouble,
        CommitFailed if a participant cannot apply the decision (I7)."""
        records = self.batch(seq)
        plan, decision = records.plan, records.decision
        if decision is None:
            state, attempt, votes, missing = records.state, records.attempt, records.votes, list(records.missing)
            if BatchState.COMMITTING not in TRANSITIONS[state]:
                reason = "no attempt was started" if attempt == 0 else f"attempt {attempt} has no vote from {missing}"
                decision = self._decide(seq, state, DecisionOutcome.ABORT, attempt, {}, f"commit found {reason}")
            else:
                self._require_configured(plan)
                invalid = self._replacement_refusals(plan, votes)
                for name, vote in sorted(votes.items()):
                    result = self.participants[name].verify(vote)
                    if not self._react(Step.VERIFY, plan, name, result):
                        invalid.append(f"{name}: {result.detail}")
                if invalid:
                    reason = f"invalid votes in attempt {attempt}: {'; '.join(invalid)}"
                    decision = self._decide(seq, state, DecisionOutcome.ABORT, attempt, {}, reason)
                else:
                    decision = self._decide(seq, state, DecisionOutcome.COMMIT, attempt, votes, "all votes valid")
        self._apply(plan, decision)
        if decision.outcome is DecisionOutcome.ABORT:
            raise BatchAborted(
                f"batch {plan.batch_id} of pipeline {self.pipeline!r} was aborted, not committed: {decision.reason} "
                f"(decided by {decision.decided_by}). Its offsets did not move: the next run re-reads the same records."
            )
        return self.describe(seq)

    # -- replacements ------------------------------------------------------------
    def _replacement_refusals(self, plan: Plan, votes: Mapping[str, Vote]) -> list[str]:
        """Before the decision: a replacement must be the plan's, and justified by the ledger alone."""
        refusal = self.replacement_refusal(plan)
        if refusal is not None:
            return [f"refused: {refusal}"]
        planned = plan.replaces.batch_seq if plan.replaces is not None else None
        return [f"{name}: refused: its vote replaces batch {BatchId(vote.replaces)}, the plan "
                + ("replaces none" if planned is None else f"batch {BatchId(planned)}")
                for name, vote in sorted(votes.items()) if vote.replaces is not None and vote.replaces != planned]

    def _committable_vote(self, plan: Plan, vote: Vote, justified: bool) -> Vote:
        """The vote as it may be applied: a replacement the ledger does not justify (a COMMIT
        decided by an older onceflow on a run's conf) is left out, so no committed batch is lost."""
        if vote.replaces is None or (justified and vote.replaces == plan.replaces.batch_seq):
            return vote
        log.warning("batch %s of %s: %s's vote would remove committed batch %s, which the plan does not justify "
                    "(%s); committed without removing it", plan.batch_id, self.pipeline, vote.participant,
                    BatchId(vote.replaces), self.replacement_refusal(plan) or "the plan replaces another batch")
        return replace(vote, replaces=None)

    def _apply_commit(self, plan: Plan, decision: Decision) -> None:
        seq = plan.batch_seq
        self._require_configured(plan)
        justified = plan.replaces is not None and self.replacement_refusal(plan) is None
        for name in sorted(decision.votes):
            if self.ledger.read_done(seq, name) is not None:
                continue
            faults.fault_point(COMMIT_EFFECT_BEFORE)
            result = self.participants[name].commit(self._committable_vote(plan, decision.votes[name], justified))
            self._react(Step.COMMIT, plan, name, result)
            faults.fault_point(COMMIT_EFFECT_AFTER)
            log.info("batch %s of %s: %s committed (%s)", plan.batch_id, self.pipeline, name, effect_note(result))
            self.ledger.create_done(DoneMarker(seq, name, DecisionOutcome.COMMIT, effect_note(result), self.identity, self._clock()))
            faults.fault_point(COMMIT_BETWEEN_EFFECTS)
        self._finish(seq, decision)

    def _apply_abort(self, plan: Plan, decision: Decision) -> None:
        seq = plan.batch_seq
        latest = self.ledger.latest_attempt(seq)
        for name in self._expected(plan):
            if self.ledger.read_done(seq, name) is not None:
                continue
            if name not in self.participants:
                # An output removed from the spec must not hold the abort (and the pipeline) for ever.
                # Nothing of it became visible; what it pre-committed is left as it is, and said so.
                detail = (f"not cleaned up: sink {name!r} is no longer configured; its staged files (if any) stay "
                          "invisible under its staging directory, its open Kafka transactions (if any) end at the "
                          "broker's transaction timeout")
                log.warning("batch %s of %s: %s", plan.batch_id, self.pipeline, detail)
                self.ledger.create_done(DoneMarker(seq, name, DecisionOutcome.ABORT, detail, self.identity, self._clock()))
                continue
            # Every attempt's vote, zombies included: abort cleans all of them.
            votes = [rv.vote for n in range(1, latest + 1) if (rv := self.ledger.read_vote(seq, n, name)) is not None]
            faults.fault_point(ABORT_EFFECT_BEFORE)
            result = self.participants[name].abort(plan, votes)
            self._react(Step.ABORT, plan, name, result)
            faults.fault_point(ABORT_EFFECT_AFTER)
            log.info("batch %s of %s: %s aborted, %d vote(s) cleaned up (%s)", plan.batch_id, self.pipeline, name, len(votes),
                     effect_note(result))
            self.ledger.create_done(DoneMarker(seq, name, DecisionOutcome.ABORT, effect_note(result), self.identity, self._clock()))
        self._finish(seq, decision)

    def _finish(self, seq: int, decision: Decision) -> None:
        outcome = decision.outcome
        current = self.batch(seq).state
        if current.terminal:
            return  # a concurrent finisher wrote the marker first: finished, nothing to change
        target = BatchState.COMMITTED if outcome is DecisionOutcome.COMMIT else BatchState.ABORTED
        self._check(seq, current, target, f"finish {outcome.value}")
        log.info("batch %s of %s: %s", BatchId(seq), self.pipeline, target.value)
        created, _ = self.ledger.create_done(DoneMarker(seq, BATCH_EFFECT, outcome, "all effects applied", self.identity, self._clock()))
        self._update_head(seq, committed=seq if outcome is DecisionOutcome.COMMIT else None)
        if created and self.on_finished is not None:
            try:
                self.on_finished(seq)
            except Exception:  # an observer (metrics) must never fail the batch it observes
                log.warning("batch %s of %s: on_finished failed", BatchId(seq), self.pipeline, exc_info=True)

    # -- abort phase / recovery ------------------------------------------------------
    def rollback(self, seq: int, reason: str) -> BatchStatus:
        """Airflow rollback task: write ABORT and undo every effect the plan
        could have produced. If COMMIT was decided first, finishes the commit
        instead (the returned status says COMMITTED). Idempotent."""
        records = self.batch(seq)
        plan, decision = records.plan, records.decision
        if decision is None:
            decision = self._decide(seq, records.state, DecisionOutcome.ABORT, records.attempt, {}, reason)
        if decision.outcome is DecisionOutcome.COMMIT:
            log.warning("batch %s of %s: COMMIT was already decided; rollback finishes the commit", plan.batch_id, self.pipeline)
        self._apply(plan, decision)
        return self.describe(seq)

    def recover(self, seq: int | None = None) -> BatchStatus | None:
        """Finish batch ``seq``, by default the latest (in an offsets pipeline only
        the latest can be unfinished: a plan is written only after its predecessor
        finished; an interval pipeline recovers each interval's own batch), as
        ``RECOVERY`` says for its state. Returns the batch's final status (None:
        no batch yet). Runs first in every plan task; safe to run anywhere, any time."""
        seq = self.latest_seq() if seq is None else seq
        if seq == 0:
            return None
        records = self.batch(seq)
        plan, decision, state = records.plan, records.decision, records.state
        action = RECOVERY.get(state)
        if action is None:
            return self.describe(seq)
        log.info("recovery: batch %s of %s was left %s: %s", plan.batch_id, self.pipeline, state.value, action.label)
        if action.decides is not None:
            # A racing COMMIT may win this decision: what follows applies the winner.
            decision = self._decide(seq, state, DecisionOutcome(action.decides), records.attempt, {},
                                    f"{action.label} by recovery: batch was {state.value} with no decision")
        self._apply(plan, decision)
        return self.describe(seq)

    # -- operator interventions --------------------------------------------------------
    def check_intervention(self, seq: int) -> Plan:
        """Refuse, saying why and what to do, unless batch ``seq`` may be split or
        skipped now: the latest batch of an offsets pipeline, ABORTED, not yet
        intervened on. Returns its plan (a skip quarantines its ranges first)."""
        latest = self.latest_seq()
        where = f"batch {BatchId(seq)} of pipeline {self.pipeline!r}"
        if seq < 1 or seq > latest:
            raise InterventionRefused(f"pipeline {self.pipeline!r} has no batch {BatchId(seq)} (latest: {BatchId(latest)})")
        plan = self.plan(seq)
        if plan.interval is not None:
            raise InterventionRefused(f"{where} reads the data interval {plan.interval}: an interval pipeline's "
                                      "batches cannot be split or skipped (reprocess the interval instead)")
        if seq != latest:
            raise InterventionRefused(f"{where} is not the latest batch ({BatchId(latest)} is): only the latest can be "
                                      "split or skipped, before the next batch is planned")
        state = self.batch(seq, plan=plan).state
        if state is not BatchState.ABORTED:
            fix = ("finish it first with `onceflow recover` (an undecided batch is aborted; pause the DAG so that no "
                   "run starts it again)" if not state.terminal else "a committed batch is never changed")
            raise InterventionRefused(f"{where} is {state.value}, not aborted: {fix}")
        existing = self.ledger.read_intervention(seq)
        if existing is not None:
            raise InterventionRefused(f"{where} was already intervened on ({existing.note()}); intervene on the next "
                                      "batch if it fails too")
        return plan

    def intervene(self, intervention: Intervention) -> Intervention:
        """Record an operator's split or skip of the latest batch (``core.planning.interventions``).
        Raises if it cannot take effect: the batch is not the latest aborted one, another
        intervention won, or the next batch was planned meanwhile without it (the record
        then stays, void: only the next plan makes an intervention take effect)."""
        seq = intervention.batch_seq
        self.check_intervention(seq)
        created, winner = self.ledger.create_intervention(intervention)
        if not created:
            raise InterventionRefused(f"batch {BatchId(seq)} of pipeline {self.pipeline!r}: another intervention was "
                                      f"recorded first ({winner.note()}); it stands")
        following = self.ledger.read_plan(seq + 1)
        if following is not None and following.intervention != intervention.note():
            raise InterventionRefused(
                f"batch {BatchId(seq + 1)} of pipeline {self.pipeline!r} was planned while this intervention was "
                f"recorded and does not follow it ({intervention.note()} is void). Pause the DAG, let that batch "
                "finish, and intervene on it if it fails too.")
        return intervention

    def votes_of_all_attempts(self, seq: int) -> Sequence[Vote]:
        """Tooling: every vote recorded for ``seq`` across attempts."""
        plan = self.plan(seq)
        latest = self.ledger.latest_attempt(seq)
        return [rv.vote for n in range(1, latest + 1) for name in self._expected(plan) if (rv := self.ledger.read_vote(seq, n, name))]
