"""What a Kafka output's abort reports for a split (``participant.ABORT_LEFT``): from the broker
profile's table, never from the broker's name."""

from __future__ import annotations

import pytest

from onceflow.config.broker_profiles import PROFILES
from onceflow.core.participant import Outcome
from onceflow.sinks.kafka.participant import ABORT_LEFT, KafkaSinkParticipant, Left, left_after_abort
from onceflow.sinks.kafka.visibility import SplitView, State
from onceflow.sinks.kafka.writer import TxnHandle

VISIBLE = (State.COMMITTED, State.REPAIRED, State.INCONSISTENT)


def test_every_state_has_a_row_for_either_kind_of_broker():
    assert set(ABORT_LEFT) == {(state, hides) for state in State for hides in (True, False)}


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_output_visible_after_an_abort_fails_it_only_where_the_profile_hides_aborted_records(name):
    profile = PROFILES[name]
    expected = Left.COMMITTED_OUTSIDE if profile.hides_aborted else Left.SHOWN
    assert {left_after_abort(state, profile) for state in VISIBLE} == {expected}
    assert left_after_abort(State.ABORTED, profile) is Left.ABORTED
    assert {left_after_abort(state, profile) for state in (State.OPEN, State.UNKNOWN)} == {Left.NOT_ENDED}


def test_apache_kafka_fails_the_abort_and_tansu_reports_it_done():
    assert left_after_abort(State.COMMITTED, PROFILES["apache"]) is Left.COMMITTED_OUTSIDE
    assert left_after_abort(State.COMMITTED, PROFILES["tansu"]) is Left.SHOWN


@pytest.mark.parametrize("name, outcome", [("apache", Outcome.FAILED), ("noida", Outcome.FAILED), ("tansu", Outcome.DONE)])
def test_what_the_abort_answers_for_a_split_visible_after_it(name, outcome):
    participant = KafkaSinkParticipant("out", "pipe", {"bootstrap.servers": "unused:9092"}, staging_root="/nowhere",
                                       broker=PROFILES[name])
    handle = TxnHandle("pipe", "out", "0000000007", 1, "orders", "onceflow.pipe.out.1.7", 5, 0, 0)

    result = participant._left(handle, SplitView(State.COMMITTED, ()))

    assert result.outcome is outcome
    assert "batch 0000000007 split 1 (onceflow.pipe.out.1.7) on orders: visible after the abort" in result.detail
    if outcome is Outcome.FAILED:  # what to do, for the person who reads `onceflow status`
        assert "committed without a COMMIT decision" in result.detail and "Stop that writer" in result.detail
