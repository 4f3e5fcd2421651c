"""The coordinator's tables are what runs: each row of ``REACTIONS`` (step x a
participant's outcome) and of ``RECOVERY`` (unfinished state -> what recovery
does) is driven through a coordinator, and the test asserts what a user sees
(the batch's state, the error, the effects), not the table's own words. A row
added to either table without a case here fails the first test of its kind."""

from __future__ import annotations

import pytest

from onceflow.core import faults
from onceflow.core.errors import AbortFailed, BatchAborted, CommitFailed, RetryLater
from onceflow.core.ledger.storage import open_ledger_storage
from onceflow.core.participant import Outcome, Result
from onceflow.core.reactions import REACTIONS, Step
from onceflow.core.states import RECOVERY, BatchState

from tests.doubles.helpers import config, prepare_all, source, world_coordinator

S = BatchState
# (step, outcome): the error the task raises (None: it succeeds), the batch's state after it,
# whether the participant's effect is marked done in the ledger.
SEEN = {
    (Step.VERIFY, Outcome.DONE): (None, S.COMMITTED, True),
    (Step.VERIFY, Outcome.ALREADY_DONE): (None, S.COMMITTED, True),
    (Step.VERIFY, Outcome.RETRY_LATER): (RetryLater, S.PREPARED, False),
    (Step.VERIFY, Outcome.FAILED): (BatchAborted, S.ABORTED, True),
    (Step.COMMIT, Outcome.DONE): (None, S.COMMITTED, True),
    (Step.COMMIT, Outcome.ALREADY_DONE): (None, S.COMMITTED, True),
    (Step.COMMIT, Outcome.RETRY_LATER): (RetryLater, S.COMMITTING, False),
    (Step.COMMIT, Outcome.FAILED): (CommitFailed, S.COMMITTING, False),
    (Step.ABORT, Outcome.DONE): (None, S.ABORTED, True),
    (Step.ABORT, Outcome.ALREADY_DONE): (None, S.ABORTED, True),
    (Step.ABORT, Outcome.RETRY_LATER): (RetryLater, S.ABORTING, False),
    (Step.ABORT, Outcome.FAILED): (AbortFailed, S.ABORTING, False),
}


@pytest.fixture
def local(tmp_path):
    return open_ledger_storage(str(tmp_path / "ledger"))


def test_every_reaction_has_a_case():
    assert set(SEEN) == set(REACTIONS)


@pytest.mark.parametrize("step, outcome", list(SEEN), ids=[f"{s.value}-{o.value}" for s, o in SEEN])
def test_each_answer_of_a_participant_does_what_its_row_says(local, step, outcome):
    coord, world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    seq, answer = plan.batch_seq, Result(outcome, f"answered {outcome.value}")
    setattr(parts["events"], f"{step.value}_answer", answer)
    run = (lambda: coord.rollback(seq, "the spark task failed")) if step is Step.ABORT else (lambda: coord.commit(seq))
    error, state, done = SEEN[step, outcome]
    if error is None:
        run()
    else:
        with pytest.raises(error, match=f"answered {outcome.value}"):
            run()
    assert coord.describe(seq).state is state
    assert (coord.ledger.read_done(seq, "events") is not None) is done
    if state is S.COMMITTED:
        assert world.visible[("files", seq)] == coord.describe(seq).decision.votes["files"]
    if state.decided and not state.terminal:
        # a retry or a stop leaves the decision standing: once the sink answers again, recovery finishes it
        setattr(parts["events"], f"{step.value}_answer", None)
        assert coord.recover().state is {S.COMMITTING: S.COMMITTED, S.ABORTING: S.ABORTED}[state]
    assert not world.refused


def _leave(coord, parts, state: BatchState) -> int:
    """A batch left in ``state`` the way a crash leaves it: through the fault points where a decision exists."""
    plan = coord.plan_next(source(), config())
    seq = plan.batch_seq
    if state is S.PREPARING:
        attempt = coord.begin_attempt(seq)
        coord.record_vote(seq, attempt, parts["files"].prepare(plan, attempt))
    elif state is not S.PLANNED:
        prepare_all(coord, parts, plan)
    if state in (S.COMMITTING, S.ABORTING):
        point, step = ("commit.effect.before", lambda: coord.commit(seq)) if state is S.COMMITTING else (
            "abort.effect.before", lambda: coord.rollback(seq, "the spark task failed"))
        faults.arm(point, "raise")
        try:
            with pytest.raises(faults.InjectedFault):
                step()
        finally:
            faults.disarm()
    assert coord.describe(seq).state is state
    return seq


# unfinished state: the state recovery ends in, and whether the batch's records became visible
FINISHED = {
    S.PLANNED: (S.ABORTED, False),
    S.PREPARING: (S.ABORTED, False),
    S.PREPARED: (S.ABORTED, False),
    S.COMMITTING: (S.COMMITTED, True),
    S.ABORTING: (S.ABORTED, False),
}


def test_every_unfinished_state_has_a_recovery_case():
    assert set(FINISHED) == set(RECOVERY)


@pytest.mark.parametrize("state", list(FINISHED), ids=[s.value for s in FINISHED])
def test_recovery_finishes_each_unfinished_state_as_its_row_says(local, state):
    coord, world, parts = world_coordinator(local)
    seq = _leave(coord, parts, state)
    status = coord.recover()
    final, visible = FINISHED[state]
    assert status.state is final and set(status.done) >= {"files", "events", "_batch"}
    assert (("files", seq) in world.visible and ("events", seq) in world.visible) is visible
    if not visible:
        assert not world.visible and world.aborted == {("files", seq), ("events", seq)}
    if RECOVERY[state].decides is not None:
        assert status.decision.reason.startswith("presumed abort by recovery")
    assert coord.recover().state is final and not world.refused  # a second recovery changes nothing
