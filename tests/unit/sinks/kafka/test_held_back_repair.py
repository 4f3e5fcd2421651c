"""A repair that another producer's open transaction hides from read_committed readers: the split's
verdict (``split_state.state_of``) and what a commit answers for it (``answers.COMMIT_ANSWERS``). The broker
produces it in tests/integration/sinks/kafka/test_sink.py
(``test_a_repair_held_back_by_another_producers_open_transaction_is_published_once``)."""

from __future__ import annotations

import pytest
from kafka.errors import KafkaTimeoutError

from onceflow.config.broker_profiles import PROFILES
from onceflow.core.participant import Outcome
from onceflow.sinks.kafka import repair as repair_module
from onceflow.sinks.kafka.answers import COMMIT_ANSWERS, CommitAnswer, Read
from onceflow.sinks.kafka.handle import TxnHandle
from onceflow.sinks.kafka.markers import OpenTransaction
from onceflow.sinks.kafka.participant import KafkaSinkParticipant
from onceflow.sinks.kafka.split_state import PartitionView, SplitState, SplitView, state_of


def _view(original=0, repaired=0, hidden=0, expected=10, partition=0) -> PartitionView:
    return PartitionView(partition, expected, original, repaired, stable_end=12, open=False, hidden_repairs=hidden)


def test_a_split_with_nothing_visible_is_aborted_only_when_no_repair_lies_past_the_stable_end():
    assert state_of((_view(), _view(partition=1))) is SplitState.ABORTED
    assert state_of((_view(), _view(hidden=10, partition=1))) is SplitState.HELD_BACK


def test_a_repair_partly_visible_with_the_rest_past_the_stable_end_is_held_back_not_inconsistent():
    # The other transaction began among the repair's records in one partition, or held back one partition only.
    assert state_of((_view(repaired=4, hidden=6),)) is SplitState.HELD_BACK
    assert state_of((_view(repaired=10), _view(hidden=10, partition=1))) is SplitState.HELD_BACK
    assert state_of((_view(repaired=4),)) is SplitState.INCONSISTENT  # nothing hidden: partly visible it is


def test_hidden_repairs_never_excuse_original_records_partly_visible_nor_hide_a_visible_repair():
    assert state_of((_view(original=3, hidden=10),)) is SplitState.INCONSISTENT
    assert state_of((_view(repaired=10, hidden=10),)) is SplitState.REPAIRED  # an aborted attempt's records past it


def test_every_state_has_a_commit_answer_and_a_held_back_repair_goes_to_the_repair_whose_fence_decides():
    # The repair id's fence aborts a repair left open half-way; only one held back by another producer stays so.
    assert set(COMMIT_ANSWERS) == {(state, read) for state in SplitState for read in Read}
    assert {COMMIT_ANSWERS[SplitState.HELD_BACK, read] for read in Read} == {CommitAnswer.REPAIR}


@pytest.mark.parametrize("described", [True, False], ids=["named", "describe-producers-failed"])
def test_a_held_back_repair_answers_retry_later_naming_the_split_and_what_holds_it(monkeypatch, described):
    def open_transactions(config, topic, partitions, timeout_s):
        if not described:
            raise KafkaTimeoutError("no answer")
        return {p: (OpenTransaction(4711, 0, 12),) for p in partitions}

    monkeypatch.setattr(repair_module, "open_transactions", open_transactions)
    participant = KafkaSinkParticipant("out", "pipe", {"bootstrap.servers": "unused:9092"}, staging_root="/nowhere",
                                       broker=PROFILES["apache"])
    handle = TxnHandle("pipe", "out", "0000000007", 1, "orders", "onceflow.pipe.out.b7.1", 5, 0, 0)
    view = SplitView(SplitState.HELD_BACK, (_view(hidden=10), _view(partition=1)))

    result = repair_module.held_back(participant.output, handle, view)

    assert result.outcome is Outcome.RETRY_LATER
    assert "batch 0000000007 split 1 (onceflow.pipe.out.b7.1) on orders" in result.detail
    assert "held back" in result.detail and "nothing is published again" in result.detail
    if described:
        assert "before them (p0: producer 4711 since offset 12)" in result.detail  # asked of p0 alone
    else:
        assert "DescribeProducers did not name them" in result.detail
