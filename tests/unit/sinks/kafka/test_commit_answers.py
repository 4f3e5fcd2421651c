"""What a Kafka output's commit answers for a split (``answers.COMMIT_ANSWERS``, run by ``commit.answer_for``)
and which strategy a broker profile commits with (``commit.COMMIT_STRATEGIES``), without a broker."""

from __future__ import annotations

import time

import pytest

from onceflow.config.broker_profiles import PROFILES
from onceflow.core.participant import Outcome, Result
from onceflow.sinks.kafka import commit as commit_module
from onceflow.sinks.kafka.answers import COMMIT_ANSWERS, CommitAnswer, Read, worst
from onceflow.sinks.kafka.commit import COMMIT_STRATEGIES, OVERDUE_TIMEOUTS, answer_for, commit_described, commit_read_back
from onceflow.sinks.kafka.handle import PartitionWrite, TxnHandle
from onceflow.sinks.kafka.participant import KafkaSinkParticipant
from onceflow.sinks.kafka.split_state import PartitionView, SplitState, SplitView

VISIBLE_BEFORE = (Read.BEFORE_END_TXN, Read.DESCRIBED)          # no EndTxn of this commit ended it
ENDED_HERE = (Read.AFTER_END_TXN, Read.DESCRIBED_ENDED_HERE)    # this commit's EndTxn was accepted


def _output(broker="apache", transaction_timeout_ms=60_000):
    return KafkaSinkParticipant("out", "pipe", {"bootstrap.servers": "unused:9092"}, staging_root="/nowhere",
                                broker=PROFILES[broker], transaction_timeout_ms=transaction_timeout_ms).output


def _handle(first_write_ms=0) -> TxnHandle:
    return TxnHandle("pipe", "out", "0000000007", 1, "orders", "onceflow.pipe.out.b7.1", 5, 0, first_write_ms,
                     partitions={0: PartitionWrite(3, 10, 12)})


def _view(state: SplitState) -> SplitView:
    return SplitView(state, (PartitionView(0, 10, 10 if state is SplitState.COMMITTED else 0, 0, 13, False),))


def test_a_visible_split_is_done_only_where_this_commit_ended_it_and_already_done_where_it_found_it_ended():
    assert {COMMIT_ANSWERS[SplitState.COMMITTED, read] for read in ENDED_HERE} == {CommitAnswer.COMMITTED}
    assert {COMMIT_ANSWERS[SplitState.COMMITTED, read] for read in VISIBLE_BEFORE} == {CommitAnswer.ALREADY}


def test_a_repair_found_after_this_commits_own_endtxn_is_inconsistent_only_when_read_back():
    # Read back: an EndTxn accepted for a transaction a read had just seen open cannot leave a repair
    # visible. Described: the coordinator had ended it, and the repair was published by an earlier commit.
    assert COMMIT_ANSWERS[SplitState.REPAIRED, Read.AFTER_END_TXN] is CommitAnswer.INCONSISTENT
    assert {COMMIT_ANSWERS[SplitState.REPAIRED, read] for read in set(Read) - {Read.AFTER_END_TXN}} == {CommitAnswer.ALREADY}


@pytest.mark.parametrize("state, answer", [
    (SplitState.ABORTED, CommitAnswer.REPAIR), (SplitState.HELD_BACK, CommitAnswer.REPAIR),
    (SplitState.OPEN, CommitAnswer.STILL_OPEN), (SplitState.UNKNOWN, CommitAnswer.UNREADABLE),
    (SplitState.INCONSISTENT, CommitAnswer.INCONSISTENT),
])
def test_a_split_not_visible_gets_the_same_answer_whenever_it_was_read(state, answer):
    assert {COMMIT_ANSWERS[state, read] for read in Read} == {answer}


@pytest.mark.parametrize("state, read, outcome", [
    (SplitState.COMMITTED, Read.AFTER_END_TXN, Outcome.DONE),
    (SplitState.COMMITTED, Read.DESCRIBED, Outcome.ALREADY_DONE),
    (SplitState.REPAIRED, Read.AFTER_END_TXN, Outcome.FAILED),
    (SplitState.OPEN, Read.AFTER_END_TXN, Outcome.RETRY_LATER),
    (SplitState.UNKNOWN, Read.BEFORE_END_TXN, Outcome.RETRY_LATER),
    (SplitState.INCONSISTENT, Read.DESCRIBED_ENDED_HERE, Outcome.FAILED),
])
def test_the_commit_answers_what_the_table_says(state, read, outcome):
    result = answer_for(_output(), None, _handle(int(time.time() * 1000)), _view(state), read, "a cause", "NONE")
    assert result.outcome is outcome
    assert result.detail.startswith("batch 0000000007 split 1 (onceflow.pipe.out.b7.1) on orders: ")


def test_an_aborted_split_goes_to_the_repair(monkeypatch):
    repaired = []
    monkeypatch.setattr(commit_module, "repair", lambda output, obs, h: repaired.append(h) or Result(Outcome.DONE, "r"))
    h = _handle()
    assert answer_for(_output(), None, h, _view(SplitState.ABORTED), Read.DESCRIBED, "cause").outcome is Outcome.DONE
    assert repaired == [h]


def test_a_split_still_open_past_its_timeouts_fails_instead_of_waiting_for_a_broker_that_never_ends_it():
    output = _output(transaction_timeout_ms=1_000)
    young = answer_for(output, None, _handle(int(time.time() * 1000)), _view(SplitState.OPEN), Read.AFTER_END_TXN, "c")
    old_ms = int(time.time() * 1000) - (OVERDUE_TIMEOUTS + 1) * 1_000
    old = answer_for(output, None, _handle(old_ms), _view(SplitState.OPEN), Read.AFTER_END_TXN, "c")
    assert (young.outcome, old.outcome) == (Outcome.RETRY_LATER, Outcome.FAILED)
    assert "does not time transactions out" in old.detail


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_broker_profile_chooses_the_commit_strategy(name):
    describes = PROFILES[name].describes_transactions
    assert COMMIT_STRATEGIES[describes] is (commit_described if describes else commit_read_back)


def test_several_splits_answer_with_the_worst_outcome_and_the_details_of_every_split_that_had_it():
    results = [Result(Outcome.DONE, "a"), Result(Outcome.RETRY_LATER, "b"), Result(Outcome.RETRY_LATER, "c"),
               Result(Outcome.ALREADY_DONE, "d")]
    assert worst(results) == Result(Outcome.RETRY_LATER, "b; c")
    assert worst([Result(Outcome.FAILED, "x"), *results]).outcome is Outcome.FAILED
    assert worst([]) == Result(Outcome.ALREADY_DONE, "nothing to commit")
