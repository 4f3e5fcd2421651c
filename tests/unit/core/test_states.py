from __future__ import annotations

from types import SimpleNamespace

import pytest

from onceflow.core.states import RECOVERY, TRANSITIONS, BatchState, IllegalTransition, check_transition, derive_state

S = BatchState


def test_every_state_has_a_row_and_finished_states_are_final():
    assert set(TRANSITIONS) == set(BatchState)
    assert TRANSITIONS[S.COMMITTED] == TRANSITIONS[S.ABORTED] == frozenset()
    # a decision is final: no path from a decided state to the other outcome
    assert S.ABORTING not in TRANSITIONS[S.COMMITTING] and S.COMMITTING not in TRANSITIONS[S.ABORTING]
    assert set(RECOVERY) == {s for s in BatchState if not s.terminal}


def _histories():
    """Every order in which a batch's records can be written: attempt, votes, decision, done;
    ABORT may be decided before any of the others, COMMIT only once every vote is in."""
    steps = [dict(has_attempt=False, all_voted=False, outcome=None, finished=False)]
    for change in (dict(has_attempt=True), dict(all_voted=True)):
        steps.append({**steps[-1], **change})
    for decision in ("COMMIT", "ABORT"):
        for before in range(len(steps)) if decision == "ABORT" else [len(steps) - 1]:
            decided = {**steps[before], "outcome": decision}
            yield [*steps[:before + 1], decided, {**decided, "finished": True}]


def test_every_history_of_records_moves_only_along_the_transition_table():
    """The two tables agree: each record written moves the state ``derive_state`` reads
    from the records along a step ``TRANSITIONS`` allows (or leaves it), from PLANNED to a
    finished state."""
    ends = set()
    for history in _histories():
        states = [derive_state(SimpleNamespace(**records)) for records in history]
        assert states[0] is S.PLANNED and states[-1].terminal, (history, states)
        for before, after in zip(states, states[1:]):
            if after is not before:
                check_transition(before, after, batch="0000000001", pipeline="p", step="test")
        ends.add(states[-1])
    assert ends == {S.COMMITTED, S.ABORTED}


def test_illegal_transition_names_batch_state_and_allowed_steps():
    check_transition(S.PREPARED, S.COMMITTING, batch="0000000003", pipeline="p", step="commit")
    with pytest.raises(IllegalTransition, match=r"batch 0000000003 of pipeline 'p'.*it is preparing.*not committing"):
        check_transition(S.PREPARING, S.COMMITTING, batch="0000000003", pipeline="p", step="commit")
    with pytest.raises(IllegalTransition, match="none \\(finished\\)"):
        check_transition(S.ABORTED, S.PREPARING, batch="0000000003", pipeline="p", step="begin_attempt")
