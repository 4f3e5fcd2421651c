"""What a Kafka output's abort reports for a split (``answers.ABORT_LEFT``): from the broker
profile's table, never from the broker's name."""

from __future__ import annotations

import pytest

from onceflow.config.broker_profiles import PROFILES
from onceflow.core.participant import Outcome
from onceflow.sinks.kafka.abort import left
from onceflow.sinks.kafka.answers import ABORT_LEFT, Left, left_after_abort
from onceflow.sinks.kafka.handle import TxnHandle
from onceflow.sinks.kafka.participant import KafkaSinkParticipant
from onceflow.sinks.kafka.split_state import SplitState, SplitView

VISIBLE = (SplitState.COMMITTED, SplitState.REPAIRED, SplitState.INCONSISTENT)


def test_every_state_has_a_row_for_either_kind_of_broker():
    assert set(ABORT_LEFT) == {(state, hides) for state in SplitState for hides in (True, False)}


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_output_visible_after_an_abort_fails_it_only_where_the_profile_hides_aborted_records(name):
    profile = PROFILES[name]
    expected = Left.COMMITTED_OUTSIDE if profile.hides_aborted else Left.SHOWN
    assert {left_after_abort(state, profile) for state in VISIBLE} == {expected}
    assert left_after_abort(SplitState.ABORTED, profile) is Left.ABORTED
    assert {left_after_abort(state, profile) for state in (SplitState.OPEN, SplitState.UNKNOWN)} == {Left.NOT_ENDED}


def test_apache_kafka_fails_the_abort_and_tansu_reports_it_done():
    assert left_after_abort(SplitState.COMMITTED, PROFILES["apache"]) is Left.COMMITTED_OUTSIDE
    assert left_after_abort(SplitState.COMMITTED, PROFILES["tansu"]) is Left.SHOWN


@pytest.mark.parametrize("name, outcome", [("apache", Outcome.FAILED), ("noida", Outcome.FAILED), ("tansu", Outcome.DONE)])
def test_what_the_abort_answers_for_a_split_visible_after_it(name, outcome):
    participant = KafkaSinkParticipant("out", "pipe", {"bootstrap.servers": "unused:9092"}, staging_root="/nowhere",
                                       broker=PROFILES[name])
    handle = TxnHandle("pipe", "out", "0000000007", 1, "orders", "onceflow.pipe.out.1.7", 5, 0, 0)

    result = left(participant.output, handle, SplitView(SplitState.COMMITTED, ()))

    assert result.outcome is outcome
    assert "batch 0000000007 split 1 (onceflow.pipe.out.1.7) on orders: visible after the abort" in result.detail
    if outcome is Outcome.FAILED:  # what to do, for the person who reads `onceflow status`
        assert "committed without a COMMIT decision" in result.detail and "Stop that writer" in result.detail
