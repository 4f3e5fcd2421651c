"""The conformance kit: what every sink kind must do, run against the author's real system.

A sink author subclasses ``SinkConformance`` in a test module and gives it one
fixture, ``sink_harness``, that returns a ``SinkHarness`` for their system::

    from onceflow.testing.conformance import SinkConformance

    class TestMyTableSink(SinkConformance):
        @pytest.fixture
        def sink_harness(self, my_database):
            return MyHarness(my_database)   # pre_commit(), visible(), participant()

Each test drives the commit side the way the coordinator does, and judges it
by what a reader of the real output sees (``SinkHarness.visible``), never by
what the participant answers alone: commit twice, abort an attempt that never
voted, a commit interrupted at each of its fault points and finished by a new
participant, a zombie attempt that writes after a newer one, a vote older than
the kind's lifetime, batches committed out of order, and reprocessing as the
kind declares it. A kind that also offers the weaker delivery guarantees runs
``AtLeastOnceConformance`` and ``NoGuaranteeConformance`` the same way, each on
a SinkSpec of that guarantee.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Mapping, Protocol, Sequence

import pytest

from onceflow.core import faults
from onceflow.core.batch_id import BatchId
from onceflow.core.participant import Outcome, Participant, Vote
from onceflow.core.plan import AT_LEAST_ONCE, NO_GUARANTEE, Plan, SinkPlan
from onceflow.sinks import sink_kind
from onceflow.pipeline.spec import SinkSpec

Row = Mapping[str, object]


class SinkHarness(Protocol):
    """The author's system under test, and the Spark side of their kind, called directly."""

    pipeline: str
    sink: SinkSpec

    def pre_commit(self, batch_seq: int, attempt: int, rows: Sequence[Row], replaces: int | None = None) -> Vote:
        """What the kind's Spark side does for one attempt: write ``rows`` (``{"key": str, "value": int}``)
        over the sink's splits so that no reader sees them, and return the vote it would record."""

    def visible(self) -> list[tuple[str, str, int]]:
        """What any reader of the output sees now: (batch id, key, value) per row, read independently
        of the participant (a query, a listing, a consumer)."""

    def participant(self) -> Participant:
        """A new commit side, as a new Airflow task process would build it."""

    def aged(self, vote: Vote, by: timedelta) -> Vote:
        """``vote`` as if it had been written ``by`` earlier (only for a kind with a ``vote_lifetime``)."""

    def job_failed(self, vote: Vote) -> None:
        """What the kind's data source does when its Spark job fails after writing ``vote``'s output
        (its ``abort(messages)``): here, because the ledger refused a zombie's vote."""


def rows_of(batch_seq: int, attempt: int, count: int = 12) -> list[dict]:
    """Rows that say which batch and attempt wrote them, so a reader can tell attempts apart."""
    return [{"key": f"b{batch_seq}-k{i}", "value": attempt * 1000 + i} for i in range(count)]


def seen(rows: Sequence[Row], batch_seq: int) -> Counter:
    return Counter((str(BatchId(batch_seq)), str(r["key"]), int(r["value"])) for r in rows)


class _Kit:
    def plan(self, harness: SinkHarness, batch_seq: int) -> Plan:
        sink = harness.sink
        ids = sink_kind(sink.kind).transactional_ids(harness.pipeline, SinkPlan(sink.name, sink.kind, sink.splits), batch_seq)
        return Plan(harness.pipeline, batch_seq, (), (SinkPlan(sink.name, sink.kind, sink.splits, ids),))

    def of_batch(self, harness: SinkHarness, batch_seq: int) -> Counter:
        batch_id = str(BatchId(batch_seq))
        return Counter(row for row in harness.visible() if row[0] == batch_id)


class SinkConformance(_Kit):
    """Subclass it and give it the fixture ``sink_harness``."""

    def test_nothing_is_visible_before_the_commit_and_all_of_it_once_after(self, sink_harness):
        rows = rows_of(1, 1)
        vote = sink_harness.pre_commit(1, 1, rows)
        assert vote.records == len(rows)
        assert self.of_batch(sink_harness, 1) == Counter()
        participant = sink_harness.participant()
        assert participant.verify(vote).ok
        assert participant.commit(vote).outcome is Outcome.DONE
        assert self.of_batch(sink_harness, 1) == seen(rows, 1)

    def test_a_second_commit_is_already_done_and_writes_nothing(self, sink_harness):
        rows = rows_of(2, 1)
        vote = sink_harness.pre_commit(2, 1, rows)
        assert sink_harness.participant().commit(vote).outcome is Outcome.DONE
        for _ in range(2):  # again from this process, and from a new one
            assert sink_harness.participant().commit(vote).outcome is Outcome.ALREADY_DONE
        assert self.of_batch(sink_harness, 2) == seen(rows, 2)

    def test_abort_undoes_an_attempt_that_never_voted_and_the_next_attempt_commits_once(self, sink_harness):
        plan = self.plan(sink_harness, 3)
        sink_harness.pre_commit(3, 1, rows_of(3, 1))  # the job died before its vote reached the ledger
        participant = sink_harness.participant()
        assert participant.abort(plan, []).ok
        assert participant.abort(plan, []).ok  # idempotent
        assert self.of_batch(sink_harness, 3) == Counter()
        rows = rows_of(3, 2)
        vote = sink_harness.pre_commit(3, 2, rows)
        assert sink_harness.participant().commit(vote).ok
        assert self.of_batch(sink_harness, 3) == seen(rows, 3)

    def test_a_commit_interrupted_at_any_fault_point_is_finished_by_a_new_participant_once(self, sink_harness):
        """Each fault point the commit reaches, in order, raises in turn (``finally`` blocks still run: a
        killed process is the chaos run's); a new participant's commit then finishes the batch, and every
        row is visible exactly once."""
        step = 0
        while True:
            step += 1
            seq = 100 + step
            rows = rows_of(seq, 1)
            vote = sink_harness.pre_commit(seq, 1, rows)
            faults.arm(faults.ANY, "raise", hits=step)
            try:
                crashed = False
                try:
                    sink_harness.participant().commit(vote)
                except faults.InjectedFault:
                    crashed = True
            finally:
                reached_every_step = bool(faults.armed())  # the point never fired: no step is left
                faults.disarm()
            assert sink_harness.participant().commit(vote).ok, f"after a crash at step {step}"
            assert self.of_batch(sink_harness, seq) == seen(rows, seq), f"after a crash at step {step}"
            if reached_every_step:
                assert not crashed
                assert step > 1, ("the commit reached no fault point: declare one at each of its steps "
                                  "(onceflow.core.faults.declare, fault_point) so that this kit can crash it there")
                break
            assert step < 50, "the commit reached more than 50 fault points: a loop?"

    def test_a_zombie_attempt_that_writes_after_a_newer_one_voted_is_never_committed(self, sink_harness):
        vote = sink_harness.pre_commit(4, 2, rows_of(4, 2))
        zombie = sink_harness.pre_commit(4, 1, rows_of(4, 1))  # attempt 1 was fenced in the ledger, yet still writes
        sink_harness.job_failed(zombie)  # the ledger refuses its vote, so Spark fails its job
        participant = sink_harness.participant()
        assert participant.commit(vote).ok
        participant.after_commit(self.plan(sink_harness, 4))
        assert self.of_batch(sink_harness, 4) == seen(rows_of(4, 2), 4)

    def test_a_vote_older_than_the_kinds_lifetime_is_refused_before_the_decision(self, sink_harness):
        lifetime = sink_kind(sink_harness.sink.kind).vote_lifetime(sink_harness.sink)
        vote = sink_harness.pre_commit(9, 1, rows_of(9, 1))
        participant = sink_harness.participant()
        if lifetime is None:  # no bound: a pre-committed output waits for its commit as long as it takes
            assert participant.verify(vote).ok
            return
        assert participant.verify(sink_harness.aged(vote, lifetime / 2)).ok
        too_old = participant.verify(sink_harness.aged(vote, lifetime + timedelta(seconds=1)))
        assert too_old.outcome is Outcome.FAILED, too_old.detail
        assert participant.abort(self.plan(sink_harness, 9), [vote]).ok  # what the coordinator then does
        assert self.of_batch(sink_harness, 9) == Counter()

    def test_batches_in_flight_together_commit_in_any_order(self, sink_harness):
        first, second = sink_harness.pre_commit(5, 1, rows_of(5, 1)), sink_harness.pre_commit(6, 1, rows_of(6, 1))
        participant = sink_harness.participant()
        early = participant.commit(second)
        # The later batch may have to wait while the earlier one holds the output back (Kafka: its open
        # transactions hold the partitions' last stable offset): RETRY_LATER, never FAILED, never a part of it.
        assert early.ok or early.outcome is Outcome.RETRY_LATER, early.detail
        assert self.of_batch(sink_harness, 6) in (Counter(), seen(rows_of(6, 1), 6))
        assert participant.commit(first).ok
        assert participant.commit(second).ok
        assert self.of_batch(sink_harness, 5) + self.of_batch(sink_harness, 6) == seen(rows_of(5, 1), 5) + seen(rows_of(6, 1), 6)

    def test_reprocessing_does_what_the_kind_declares(self, sink_harness):
        how = sink_kind(sink_harness.sink.kind).reprocess(sink_harness.sink)
        assert how in ("replaced", "republished", None)
        first = sink_harness.pre_commit(7, 1, rows_of(7, 1))
        assert sink_harness.participant().commit(first).ok
        if how is None:  # refused before anything is read: the earlier batch stays as it was
            from onceflow.core.intervals import ReprocessRefused
            from onceflow.sinks import reprocessing
            from onceflow.pipeline.spec import PipelineSpec

            with pytest.raises(ReprocessRefused):
                reprocessing(PipelineSpec(sink_harness.pipeline, ("t",), "m:f", (sink_harness.sink,)))
            assert self.of_batch(sink_harness, 7) == seen(rows_of(7, 1), 7)
            return
        again = sink_harness.pre_commit(8, 1, rows_of(8, 1), replaces=7)
        assert sink_harness.participant().commit(again).ok
        assert self.of_batch(sink_harness, 8) == seen(rows_of(8, 1), 8)
        assert self.of_batch(sink_harness, 7) == (Counter() if how == "replaced" else seen(rows_of(7, 1), 7))


class _VisibleWrites(_Kit):
    """What a kind promises for an output whose guarantee is not exactly_once: its Spark side writes
    visibly, and its participant has nothing to commit or take back."""

    guarantee: str

    def test_the_kind_offers_the_guarantee_the_harness_writes(self, sink_harness):
        assert sink_harness.sink.guarantee == self.guarantee, "give the harness's SinkSpec this guarantee"
        assert self.guarantee in sink_kind(sink_harness.sink.kind).guarantees

    def test_rows_are_visible_once_written_and_commits_add_nothing(self, sink_harness):
        rows = rows_of(21, 1)
        vote = sink_harness.pre_commit(21, 1, rows)
        assert vote.records == len(rows)
        assert self.of_batch(sink_harness, 21) == seen(rows, 21)  # no transaction: visible at once
        for _ in range(2):  # the commit task, then a retry of it from a new process
            result = sink_harness.participant().commit(vote)
            assert result.outcome in (Outcome.DONE, Outcome.ALREADY_DONE), result.detail
        assert self.of_batch(sink_harness, 21) == seen(rows, 21)


class AtLeastOnceConformance(_VisibleWrites):
    """For a kind's ``at_least_once`` outputs: subclass it and give it ``sink_harness`` on a SinkSpec
    with ``guarantee="at_least_once"``. A replay may repeat rows; it may never lose one."""

    guarantee = AT_LEAST_ONCE

    def test_a_failed_attempt_stays_visible_and_its_replay_loses_nothing(self, sink_harness):
        first = rows_of(22, 1)
        sink_harness.pre_commit(22, 1, first)  # the job died after writing: nothing can take it back
        participant = sink_harness.participant()
        assert participant.abort(self.plan(sink_harness, 22), []).ok
        replayed = rows_of(22, 2)
        vote = sink_harness.pre_commit(22, 2, replayed)
        assert participant.commit(vote).ok
        visible = self.of_batch(sink_harness, 22)
        assert visible == seen(first, 22) + seen(replayed, 22), "every row of both attempts, each once per write"


class NoGuaranteeConformance(_VisibleWrites):
    """For a kind's ``none`` outputs (written once, never replayed into: ``run_batch`` records an empty
    vote for a retried attempt or a replay): subclass it and give it ``sink_harness`` on a SinkSpec with
    ``guarantee="none"``."""

    guarantee = NO_GUARANTEE
