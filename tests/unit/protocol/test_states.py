from __future__ import annotations

import pytest

from onceflow.protocol.states import RECOVERY, TRANSITIONS, BatchState, IllegalTransition, check_transition, derive_state

S = BatchState


def test_every_state_has_a_row_and_finished_states_are_final():
    assert set(TRANSITIONS) == set(BatchState)
    assert TRANSITIONS[S.COMMITTED] == TRANSITIONS[S.ABORTED] == frozenset()
    # a decision is final: no path from a decided state to the other outcome
    assert S.ABORTING not in TRANSITIONS[S.COMMITTING] and S.COMMITTING not in TRANSITIONS[S.ABORTING]
    assert set(RECOVERY) == {s for s in BatchState if not s.terminal}


def test_state_is_derived_from_records():
    assert derive_state(has_attempt=False, all_voted=False, decision=None, done=False) is S.PLANNED
    assert derive_state(has_attempt=True, all_voted=False, decision=None, done=False) is S.PREPARING
    assert derive_state(has_attempt=True, all_voted=True, decision=None, done=False) is S.PREPARED
    assert derive_state(has_attempt=True, all_voted=True, decision="COMMIT", done=False) is S.COMMITTING
    assert derive_state(has_attempt=True, all_voted=True, decision="COMMIT", done=True) is S.COMMITTED
    assert derive_state(has_attempt=False, all_voted=False, decision="ABORT", done=False) is S.ABORTING
    assert derive_state(has_attempt=False, all_voted=False, decision="ABORT", done=True) is S.ABORTED


def test_illegal_transition_names_batch_state_and_allowed_steps():
    check_transition(S.PREPARED, S.COMMITTING, batch="0000000003", pipeline="p", step="commit")
    with pytest.raises(IllegalTransition, match=r"batch 0000000003 of pipeline 'p'.*it is preparing.*not committing"):
        check_transition(S.PREPARING, S.COMMITTING, batch="0000000003", pipeline="p", step="commit")
    with pytest.raises(IllegalTransition, match="none \\(finished\\)"):
        check_transition(S.ABORTED, S.PREPARING, batch="0000000003", pipeline="p", step="begin_attempt")
