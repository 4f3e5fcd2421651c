"""The conformance kit proves itself: run on the SQLite example kind broken on purpose, each break
fails the kit test that names it. Each broken kind is the example with one member changed."""

from __future__ import annotations

import dataclasses
import sqlite3
from contextlib import closing

from onceflow.core import faults
from onceflow.sinks.api import Outcome, Result
from onceflow_sqlite_sink.table import SqliteTableSink, batch_prefix, transaction, vote_for
from tests.integration.examples.test_sqlite_sink import SqliteHarness

pytest_plugins = ["pytester"]
UNLISTED = "sqlite.commit.unlisted"


class AbortLeavesStagedRows(SqliteTableSink):
    def abort(self, plan, votes):
        return Result(Outcome.DONE, "aborted")  # and every staged row stays


class CommitWritesTwice(SqliteTableSink):
    def _committed(self, conn, stage):
        return False  # never looks for its marker

    def _mark(self, conn, split):
        pass


class CommitPublishesEveryStagedCopy(SqliteTableSink):
    def commit(self, vote):  # every task attempt's copy of the batch, not only the voted ones
        prefix = batch_prefix(self.pipeline, self.name, vote.batch_seq)
        with closing(sqlite3.connect(self.database)) as conn:
            stages = conn.execute("SELECT onceflow_stage, count(*) FROM counts_staged WHERE substr(onceflow_stage, 1, ?) = ? "
                                  "GROUP BY onceflow_stage", [len(prefix), prefix]).fetchall()
        every = [{"split": 0, "stage": stage, "rows": rows} for stage, rows in stages]
        return super().commit(dataclasses.replace(vote, payload={**vote.payload, "splits": every}))


class CommitWithoutAFaultPoint(SqliteTableSink):
    def _commit(self, vote):  # one transaction: atomic, and nowhere for the kit to crash it
        with transaction(self.database) as conn:
            todo = [s for s in vote.payload["splits"] if not self._committed(conn, s["stage"])]
            for split in todo:
                self._move(conn, split)
        return Result(Outcome.DONE if todo else Outcome.ALREADY_DONE)


class CommitAtAnUnlistedFaultPoint(SqliteTableSink):
    def _commit(self, vote):
        faults.fault_point(UNLISTED)  # declared by this module, which no entry point lists
        return super()._commit(vote)


class BrokenHarness(SqliteHarness):
    participant_class = SqliteTableSink

    def participant(self):
        return self.participant_class(self.sink.name, self.pipeline, self.database, self.sink.target)


class VoteForgetsASplit(BrokenHarness):
    def pre_commit(self, batch_seq, attempt, rows, replaces=None, task_attempt=0):
        vote = super().pre_commit(batch_seq, attempt, rows, replaces, task_attempt)
        return vote_for(self.sink.name, batch_seq, attempt, self.database, self.sink.target, vote.payload["splits"][:-1],
                        replaces)


BROKEN = {  # broken kind -> (its harness, the kit test that must fail)
    "AbortLeavesStagedRows":
        (AbortLeavesStagedRows, "test_an_abort_leaves_nothing_of_any_attempt_voted_or_not_nor_of_a_zombie_that_wrote_before_it"),
    "CommitWritesTwice": (CommitWritesTwice, "test_a_second_commit_is_already_done_and_writes_nothing"),
    "CommitPublishesEveryStagedCopy": (CommitPublishesEveryStagedCopy,
                                       "test_of_two_task_attempts_of_a_split_only_the_voted_one_is_published_and_the_other_is_gone"),
    "CommitWithoutAFaultPoint": (CommitWithoutAFaultPoint,
                                 "test_a_commit_interrupted_at_any_fault_point_is_finished_by_a_new_participant_once"),
    "CommitAtAnUnlistedFaultPoint": (CommitAtAnUnlistedFaultPoint,
                                     "test_every_fault_point_of_the_kind_is_listed_and_reached_by_the_kit"),
    "VoteForgetsASplit": (None, "test_nothing_is_visible_before_the_commit_and_all_of_it_once_after"),
}


def harness_of(broken: str, directory) -> SqliteHarness:
    participant, _ = BROKEN[broken]
    harness_class = VoteForgetsASplit if participant is None else type(broken, (BrokenHarness,), {"participant_class": participant})
    return harness_class(directory)


KIT_RUN = '''
import pytest

from onceflow.testing.conformance import SinkConformance
from tests.integration.examples.test_kit_on_broken_kinds import BROKEN, harness_of
from tests.integration.examples.test_sqlite_sink import database_dir  # noqa: F401 (a fixture)

for name in BROKEN:
    globals()[f"Test{name}"] = type(f"Test{name}", (SinkConformance,), {
        "sink_harness": pytest.fixture(lambda self, database_dir, name=name: harness_of(name, database_dir), name="sink_harness")})
'''


def test_each_broken_kind_fails_the_kit_test_that_names_its_break(pytester, monkeypatch):
    monkeypatch.setattr(faults, "ALL_POINTS", dict(faults.ALL_POINTS))  # the unlisted point is this test's alone
    monkeypatch.setattr(faults, "DECLARED_IN", dict(faults.DECLARED_IN))
    faults.declare(UNLISTED, "a point of the broken kind, in a module no entry point lists")
    pytester.makepyfile(test_broken_kinds=KIT_RUN)
    run = pytester.inline_run("-p", "no:cacheprovider", "-p", "no:schemathesis", "--tb=line", "-q")
    failed: dict[str, dict[str, str]] = {}
    for report in run.getreports("pytest_runtest_logreport"):
        if report.failed:
            _, kind, test = report.nodeid.split("::")
            failed.setdefault(kind.removeprefix("Test"), {})[test] = report.longreprtext
    missed = {name: sorted(failed.get(name, ())) for name, (_, test) in BROKEN.items() if test not in failed.get(name, ())}
    assert not missed, f"the kit missed these breaks (kit tests that failed instead): {missed}"
    # Its asserts are rewritten, installed as it is: a failure shows the values compared, not a bare AssertionError.
    said = failed["CommitWritesTwice"]["test_a_second_commit_is_already_done_and_writes_nothing"]
    assert "assert <Outcome.DONE: 'done'> is <Outcome.ALREADY_DONE: 'already_done'>" in said, said
