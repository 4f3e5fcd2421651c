"""The conformance kit: what every sink kind must do, run against the author's real system.

A sink author subclasses ``SinkConformance`` in a test module and gives it one
fixture, ``sink_harness``, that returns a ``SinkHarness`` for their system::

    from onceflow.testing.conformance import SinkConformance

    class TestMyTableSink(SinkConformance):
        @pytest.fixture
        def sink_harness(self, my_database):
            return MyHarness(my_database)   # pre_commit(), visible(), held(), participant(), ...

Each test drives the commit side the way the coordinator does, and judges it
by what a reader of the real output sees (``SinkHarness.visible``) and by what
the kind still holds that no reader sees (``SinkHarness.held``), never by what
the participant answers alone: commit twice, abort an attempt that never
voted, a commit interrupted at each of its fault points and finished by a new
participant, zombie attempts that write after a newer one or after the abort,
two task attempts of one split, a vote older than the kind's lifetime, batches
committed out of order, reprocessing as the kind declares it; and every fault
point of the kind listed where any process can arm it, and reached.
``SparkSideConformance`` runs the kind's Spark half on a local session as the
batch job does, and reads the batch back through ``committed_output``. A kind
that also offers the weaker delivery guarantees runs ``AtLeastOnceConformance``
and ``NoGuaranteeConformance`` the same way, each on a SinkSpec of that
guarantee. docs/writing-a-sink.md shows a harness whole.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping, Protocol, Sequence

import pytest

from onceflow.core import faults
from onceflow.core.batch_id import BatchId
from onceflow.core.participant import Outcome, Participant, Vote
from onceflow.core.plan import AT_LEAST_ONCE, NO_GUARANTEE, Plan, SinkPlan
from onceflow.config.deployment import Deployment
from onceflow.config.settings import ConfigurationError
from onceflow.sinks import kind_module, sink_kind, reprocessing
from onceflow.sinks.api import AuditScope, job_options
from onceflow.pipeline.spec import PipelineSpec, SinkSpec
from onceflow.core.coordinator import Coordinator
from onceflow.core.ledger.storage import deployment_ledger_storage
from onceflow.core.planning.intervals import ReprocessRefused
from onceflow.core.states import BatchState

Row = Mapping[str, object]


@dataclass(frozen=True)
class Held:
    """Something of a batch that a kind still holds outside its visible output: a staged file or
    row, a pending upload, a prepared or open transaction, a staged copy."""

    what: str
    # The bound after which the system itself ends it (a Kafka broker aborts an open transaction
    # after its transaction timeout); None: it stays until a rollback, a commit or a human ends it.
    ends_within: timedelta | None = None

    def __str__(self) -> str:
        until = f"ended by the system within {self.ends_within}" if self.ends_within else "held until removed"
        return f"{self.what} ({until})"


class SinkHarness(Protocol):
    """The author's system under test, and the Spark side of their kind, called directly."""

    pipeline: str
    sink: SinkSpec

    def pre_commit(self, batch_seq: int, attempt: int, rows: Sequence[Row], replaces: int | None = None,
                   task_attempt: int = 0) -> Vote:
        """What the kind's Spark side does for one attempt: write ``rows`` (``{"key": str, "value": int}``)
        over the sink's splits so that no reader sees them, and return the vote it would record. Every
        split is written as Spark's task attempt ``task_attempt`` of it (``TaskContext.taskAttemptId()``):
        a second call with another one stages a second copy beside the first, as a retried or speculative
        task does, and its vote names that call's copies only. The batch was planned at
        ``planned_at_ms(batch_seq)``."""

    def visible(self) -> list[tuple[str, str, int]]:
        """What any reader of the output sees now: (batch id, key, value) per row, read independently
        of the participant (a query, a listing, a consumer)."""

    def held(self, batch_seq: int) -> list[Held]:
        """What the kind still holds of batch ``batch_seq`` outside its visible output, of every attempt
        and task attempt, voted or not: staged rows or files, pending uploads, prepared or open
        transactions, staged copies; read independently of the participant, as ``visible`` is."""

    def participant(self) -> Participant:
        """A new commit side, as a new Airflow task process would build it."""

    def aged(self, vote: Vote, by: timedelta) -> Vote:
        """``vote`` as if it had been written ``by`` earlier (only for a kind with a ``vote_lifetime``)."""

    def job_failed(self, vote: Vote) -> None:
        """What the kind's data source does when its Spark job fails after writing ``vote``'s output
        (its ``abort(messages)``): here, because the ledger refused a zombie's vote."""


def rows_of(batch_seq: int, attempt: int, count: int = 12, task_attempt: int = 0) -> list[dict]:
    """Rows that say which batch, attempt and task attempt wrote them, so a reader can tell them apart."""
    return [{"key": f"b{batch_seq}-k{i}", "value": attempt * 1000 + task_attempt * 100 + i} for i in range(count)]


def planned_at_ms(batch_seq: int) -> int:
    """When the kit's batch ``batch_seq`` was planned (``Plan.created_at_ms``; a job passes it to
    ``pre_commit`` as ``planned_at_ms``)."""
    return 1_000 + batch_seq


def seen(rows: Sequence[Row], batch_seq: int) -> Counter:
    return Counter((str(BatchId(batch_seq)), str(r["key"]), int(r["value"])) for r in rows)


class _Kit:
    def plan(self, harness: SinkHarness, batch_seq: int) -> Plan:
        sink = harness.sink
        plan = SinkPlan(sink.name, sink.kind, sink.splits, guarantee=sink.guarantee)
        ids = sink_kind(sink.kind).transactional_ids(harness.pipeline, plan, batch_seq)
        return Plan(harness.pipeline, batch_seq, (), (dataclasses.replace(plan, transactional_ids=ids),),
                    created_at_ms=planned_at_ms(batch_seq))

    def of_batch(self, harness: SinkHarness, batch_seq: int) -> Counter:
        batch_id = str(BatchId(batch_seq))
        return Counter(row for row in harness.visible() if row[0] == batch_id)

    def committed(self, harness: SinkHarness, vote: Vote) -> None:
        """The commit task's two steps: the commit, then what it runs once the batch is COMMITTED."""
        participant = harness.participant()
        result = participant.commit(vote)
        assert result.ok, result.detail
        participant.after_commit(self.plan(harness, vote.batch_seq))

    def nothing_held(self, harness: SinkHarness, batch_seq: int, after: str) -> None:
        # What the system ends by itself (ends_within) is not clean either: until then it holds the output back.
        held = harness.held(batch_seq)
        assert not held, f"after {after}, the kind still holds of batch {batch_seq}: " + "; ".join(map(str, held))


# The fault points each kit test class reached, test by test (the last kit test judges them).
_REACHED: dict[type, dict[str, set[str]]] = defaultdict(dict)


class SinkConformance(_Kit):
    """Subclass it and give it the fixture ``sink_harness``."""

    @pytest.fixture(autouse=True)
    def _record_fault_points(self, request):
        with faults.recording() as reached:
            yield
        _REACHED[type(self)][request.function.__name__] = reached

    def test_nothing_is_visible_before_the_commit_and_all_of_it_once_after(self, sink_harness):
        rows = rows_of(1, 1)
        vote = sink_harness.pre_commit(1, 1, rows)
        assert vote.records == len(rows)
        assert self.of_batch(sink_harness, 1) == Counter()
        assert sink_harness.held(1), ("held() reports nothing of a batch pre_commit staged: it must show what the kind "
                                      "holds outside its visible output, or the kit cannot see what a kind leaks")
        participant = sink_harness.participant()
        assert participant.verify(vote).ok
        assert participant.commit(vote).outcome is Outcome.DONE
        assert self.of_batch(sink_harness, 1) == seen(rows, 1)
        participant.after_commit(self.plan(sink_harness, 1))
        self.nothing_held(sink_harness, 1, "the commit and after_commit")

    def test_a_second_commit_is_already_done_and_writes_nothing(self, sink_harness):
        rows = rows_of(2, 1)
        vote = sink_harness.pre_commit(2, 1, rows)
        assert sink_harness.participant().commit(vote).outcome is Outcome.DONE
        for _ in range(2):  # again from this process, and from a new one
            assert sink_harness.participant().commit(vote).outcome is Outcome.ALREADY_DONE
        assert self.of_batch(sink_harness, 2) == seen(rows, 2)
        sink_harness.participant().after_commit(self.plan(sink_harness, 2))
        self.nothing_held(sink_harness, 2, "three commits and after_commit")

    def test_abort_undoes_an_attempt_that_never_voted_and_the_next_attempt_commits_once(self, sink_harness):
        plan = self.plan(sink_harness, 3)
        sink_harness.pre_commit(3, 1, rows_of(3, 1))  # the job died before its vote reached the ledger
        participant = sink_harness.participant()
        assert participant.abort(plan, []).ok
        assert participant.abort(plan, []).ok  # idempotent
        assert self.of_batch(sink_harness, 3) == Counter()
        self.nothing_held(sink_harness, 3, "the abort")
        rows = rows_of(3, 2)
        self.committed(sink_harness, sink_harness.pre_commit(3, 2, rows))
        assert self.of_batch(sink_harness, 3) == seen(rows, 3)
        self.nothing_held(sink_harness, 3, "the next attempt's commit and after_commit")

    def test_an_abort_leaves_nothing_of_any_attempt_voted_or_not_nor_of_a_zombie_that_wrote_before_it(self, sink_harness):
        plan = self.plan(sink_harness, 10)
        sink_harness.pre_commit(10, 1, rows_of(10, 1))  # never voted
        vote = sink_harness.pre_commit(10, 2, rows_of(10, 2))
        sink_harness.pre_commit(10, 1, rows_of(10, 1, task_attempt=1), task_attempt=1)  # a task of attempt 1 still running
        assert sink_harness.participant().abort(plan, [vote]).ok
        assert self.of_batch(sink_harness, 10) == Counter()
        self.nothing_held(sink_harness, 10, "the abort")

    def test_a_zombie_that_writes_after_the_abort_is_held_and_reported_until_the_next_attempt_ends_it(self, sink_harness):
        """Nothing can fence a write that has not begun: a task of an aborted attempt that writes after the
        rollback leaves what only the next attempt, the system's own bound (``Held.ends_within``) or a human
        ends. ``held`` must show it, and the next attempt must neither publish it nor leave it."""
        plan = self.plan(sink_harness, 11)
        sink_harness.pre_commit(11, 1, rows_of(11, 1))
        assert sink_harness.participant().abort(plan, []).ok
        self.nothing_held(sink_harness, 11, "the abort")
        sink_harness.pre_commit(11, 1, rows_of(11, 1, task_attempt=1), task_attempt=1)
        assert self.of_batch(sink_harness, 11) == Counter()
        assert sink_harness.held(11), "a zombie wrote after the abort, and held() reports nothing of it"
        rows = rows_of(11, 2)
        self.committed(sink_harness, sink_harness.pre_commit(11, 2, rows))
        assert self.of_batch(sink_harness, 11) == seen(rows, 11)
        self.nothing_held(sink_harness, 11, "the next attempt's commit and after_commit")

    def test_of_two_task_attempts_of_a_split_only_the_voted_one_is_published_and_the_other_is_gone(self, sink_harness):
        """Spark runs a split again when a task fails or is slow (a retried or speculative task), and takes
        one task attempt's output per split: the vote names that one; the other staged copy is a loser's."""
        rows, losers = rows_of(12, 1), rows_of(12, 1, task_attempt=1)
        vote = sink_harness.pre_commit(12, 1, rows)
        sink_harness.pre_commit(12, 1, losers, task_attempt=1)
        self.committed(sink_harness, vote)
        assert self.of_batch(sink_harness, 12) == seen(rows, 12), "only the voted task attempts' rows, once"
        self.nothing_held(sink_harness, 12, "the commit and after_commit")

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
            self.committed(sink_harness, vote)
            assert self.of_batch(sink_harness, seq) == seen(rows, seq), f"after a crash at step {step}"
            self.nothing_held(sink_harness, seq, f"a crash at step {step}, the commit and after_commit")
            if reached_every_step:
                assert not crashed
                assert step > 1, ("the commit reached no fault point: declare one at each of its steps "
                                  "(onceflow.core.faults.declare) and call onceflow.core.faults.fault_point there, "
                                  "so that this kit can crash it there")
                break
            assert step < 50, "the commit reached more than 50 fault points: a loop?"

    def test_a_zombie_attempt_that_writes_after_a_newer_one_voted_is_never_committed(self, sink_harness):
        vote = sink_harness.pre_commit(4, 2, rows_of(4, 2))
        zombie = sink_harness.pre_commit(4, 1, rows_of(4, 1))  # attempt 1 was fenced in the ledger, yet still writes
        sink_harness.job_failed(zombie)  # the ledger refuses its vote, so Spark fails its job
        self.committed(sink_harness, vote)
        assert self.of_batch(sink_harness, 4) == seen(rows_of(4, 2), 4)
        self.nothing_held(sink_harness, 4, "the commit and after_commit")

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
        self.nothing_held(sink_harness, 9, "the abort")

    def test_batches_in_flight_together_commit_in_any_order(self, sink_harness):
        first, second = sink_harness.pre_commit(5, 1, rows_of(5, 1)), sink_harness.pre_commit(6, 1, rows_of(6, 1))
        participant = sink_harness.participant()
        early = participant.commit(second)
        # The later batch may have to wait while the earlier one holds the output back (Kafka: its open
        # transactions hold the partitions' last stable offset): RETRY_LATER, never FAILED, never a part of it.
        assert early.ok or early.outcome is Outcome.RETRY_LATER, early.detail
        assert self.of_batch(sink_harness, 6) in (Counter(), seen(rows_of(6, 1), 6))
        self.committed(sink_harness, first)
        self.committed(sink_harness, second)
        assert self.of_batch(sink_harness, 5) + self.of_batch(sink_harness, 6) == seen(rows_of(5, 1), 5) + seen(rows_of(6, 1), 6)
        for seq in (5, 6):
            self.nothing_held(sink_harness, seq, "both commits and after_commit")

    def test_reprocessing_does_what_the_kind_declares(self, sink_harness):
        how = sink_kind(sink_harness.sink.kind).reprocess(sink_harness.sink)
        assert how in ("replaced", "republished", None)
        self.committed(sink_harness, sink_harness.pre_commit(7, 1, rows_of(7, 1)))
        if how is None:  # refused before anything is read: the earlier batch stays as it was
            with pytest.raises(ReprocessRefused):
                reprocessing(PipelineSpec(sink_harness.pipeline, ("t",), "m:f", (sink_harness.sink,)))
            assert self.of_batch(sink_harness, 7) == seen(rows_of(7, 1), 7)
            return
        self.committed(sink_harness, sink_harness.pre_commit(8, 1, rows_of(8, 1), replaces=7))
        assert self.of_batch(sink_harness, 8) == seen(rows_of(8, 1), 8)
        assert self.of_batch(sink_harness, 7) == (Counter() if how == "replaced" else seen(rows_of(7, 1), 7))
        for seq in (7, 8):
            self.nothing_held(sink_harness, seq, f"the {how} batch's commit and after_commit")

    def test_check_options_refuses_an_option_the_kind_does_not_take_naming_it(self, sink_harness):
        sink = sink_harness.sink
        with pytest.raises(ConfigurationError, match="no_such_option"):  # SinkSpec asks the kind's check_options
            dataclasses.replace(sink, options={**sink.options, "no_such_option": "1"})

    def test_the_asset_uri_is_stable_and_airflow_takes_it_as_it_is(self, sink_harness):
        from airflow.sdk import Asset

        kind, sink = sink_kind(sink_harness.sink.kind), sink_harness.sink
        uri = kind.asset_uri(sink, "file:///warehouse")
        assert uri == kind.asset_uri(dataclasses.replace(sink), "file:///warehouse"), "the same output, another URI"
        assert Asset(uri).uri == uri, "Airflow rewrites the URI: its DAGs would not match the outputs' assets"

    def test_every_fault_point_of_the_kind_is_listed_and_reached_by_the_kit(self, sink_harness):
        """Run last of the kit's tests: a point the kit reached must be one any process can arm by name
        (its module listed in the package's ``onceflow.fault_points`` entry points), and every point the
        kind's package declares must be reached by some kit test, or the kit never crashes the kind there."""
        ran = _REACHED[type(self)]
        reached = set().union(*ran.values())
        unlisted = sorted(reached - faults.listed_points())
        assert not unlisted, (f"fault point(s) {', '.join(unlisted)} are declared in module(s) "
                              f"{', '.join(sorted({faults.DECLARED_IN[p] for p in unlisted}))}, which no "
                              f"{faults.ENTRY_POINT_GROUP!r} entry point of an installed package lists: arming them "
                              "by name fails in any process that did not import them. List each module in the "
                              "package's pyproject.toml and reinstall it")
        not_run = sorted(set(KIT_TESTS) - set(ran))
        if not_run:
            pytest.skip(f"which fault points the kit reaches is judged over all its tests; not run: {', '.join(not_run)}")
        package = kind_module(sink_harness.sink.kind).rpartition(".")[0] or kind_module(sink_harness.sink.kind)
        declared = {p for p, module in faults.DECLARED_IN.items() if module == package or module.startswith(f"{package}.")}
        never = sorted(declared - reached)
        assert not never, (f"fault point(s) {', '.join(never)} of package {package} are declared, and no kit test "
                           "reaches them: call onceflow.core.faults.fault_point at each, on a path the harness drives")


# The kit's tests whose fault points the last one judges.
KIT_TESTS = tuple(name for name in vars(SinkConformance)
                  if name.startswith("test_") and name != "test_every_fault_point_of_the_kind_is_listed_and_reached_by_the_kit")


class SparkSideHarness(SinkHarness, Protocol):
    """A ``SinkHarness`` whose kind's Spark half runs on a local Spark session (``SparkSideConformance``)."""

    # What the kind's pre_commit and committed_output get; the pipeline's ledger lives in its warehouse.
    deployment: Deployment

    def frame(self, spark: Any, rows: Sequence[Row]) -> Any:
        """``rows`` as the DataFrame a transform hands the kind (its columns, its types)."""


class SparkSideConformance(_Kit):
    """The kind's Spark half, as the batch job drives it: subclass it and give it the fixtures
    ``sink_harness`` (a ``SparkSideHarness``) and ``spark`` (a local session)."""

    def test_pre_commit_through_the_registered_data_source_votes_what_commits_and_the_audit_reads_back(
            self, sink_harness, spark):
        sink, deployment = sink_harness.sink, sink_harness.deployment
        kind = sink_kind(sink.kind)
        spec = PipelineSpec(sink_harness.pipeline, ("t",), "m:f", (sink,))
        coordinator = Coordinator(deployment_ledger_storage(deployment), spec.name, {sink.name: sink_harness.participant()})
        plan = coordinator.plan_new_batch(lambda seq: self.plan(sink_harness, seq))
        seq, attempt = plan.batch_seq, coordinator.begin_attempt(plan.batch_seq)
        rows = rows_of(seq, attempt)
        from onceflow.sinks import committed_reader
        from onceflow.sources.kafka import data_source as kafka_source

        # What the batch job and the audit register: the kind's data source, the input's (whose range
        # reader a Kafka output's committed_output uses) and the audit's reader of committed Parquet.
        for module in (importlib.import_module(kind.data_source), kafka_source, committed_reader):
            module.register(spark)
        frame = sink_harness.frame(spark, rows).repartition(sink.splits)  # the job hands it over in the sink's splits
        kind.pre_commit(frame, sink, plan.sink(sink.name), deployment,
                        job_options(spec.name, deployment.to_option(), sink.name, seq, plan.created_at_ms, attempt))
        assert self.of_batch(sink_harness, seq) == Counter()
        status = coordinator.commit(seq)  # the vote the data source recorded, verified and committed
        assert status.state is BatchState.COMMITTED and status.votes[sink.name].records == len(rows), status
        sink_harness.participant().after_commit(plan)
        assert self.of_batch(sink_harness, seq) == seen(rows, seq)
        self.nothing_held(sink_harness, seq, "a batch the Spark job pre-committed, its commit and after_commit")
        output = kind.committed_output(spark, sink, spec, deployment,
                                       AuditScope(frozenset({plan.batch_id}), frame.schema, {plan.batch_id: status}))
        assert not output.findings, output.findings
        read = Counter(row["batch"] for row in output.frame.select("batch").collect()) if output.frame is not None else {}
        assert read == {plan.batch_id: len(rows)}, f"committed_output ({output.reading}) read back {read}"


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
