"""The Iceberg sink participant against real catalogs: the REST catalog, and the SQL catalog
on local and S3 warehouses.

Each test writes real data files with pyiceberg's writer the way a Spark task
does, drives the participant the way the coordinator does, and then reads the
table back through the catalog, as any engine would.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pytest

from onceflow.core import faults
from onceflow.sinks.iceberg import tables
from onceflow.core.participant import Outcome
from onceflow.core.plan import Plan

from .conftest import SCHEMA

SEQ = 7
PLANNED_AT = 1_790_000_000_000  # the batch's plan's created_at_ms: part of its key in the table
DAY = dt.datetime(2026, 11, 24, tzinfo=dt.timezone.utc)


def rows(split: int, n: int, days: int = 2) -> pa.Table:
    """``n`` rows over ``days`` days: one data file per day (partition)."""
    return pa.table({"split": [split] * n, "i": list(range(n)),
                     "day": [DAY + dt.timedelta(days=i % days) for i in range(n)]}, schema=SCHEMA)


def write(t, seq: int, attempt: int, split: int, n: int, planned_at: int = PLANNED_AT) -> list[dict]:
    return tables.write_data_files(t.table(), t.pipeline, t.sink_name, seq, planned_at, attempt, rows(split, n).to_batches())


def voted(t, seq: int = SEQ, attempt: int = 1, replaces: int | None = None, sizes=(5, 3), planned_at: int = PLANNED_AT):
    """A vote for splits of ``sizes`` rows; a failed task attempt's files lie beside them, in no vote."""
    write(t, seq, attempt, 0, 99, planned_at)  # the failed first attempt of split 0
    files = [f for split, n in enumerate(sizes) for f in write(t, seq, attempt, split, n, planned_at)]
    return t.sink().vote_for(seq, planned_at, attempt, t.table().location(), files, replaces=replaces)


def files_under(t, seq: int, planned_at: int = PLANNED_AT) -> list[str]:
    from onceflow.sinks.iceberg.participant import _list_files

    table = t.table()
    return _list_files(table.io, tables.batch_dir(table.location(), t.pipeline, t.sink_name, seq, planned_at))


def commit_until_settled(sink, vote):
    """Commit as the commit task does: a RETRY_LATER (a busy catalog) is retried."""
    for _ in range(20):
        result = sink.commit(vote)
        if result.outcome is not Outcome.RETRY_LATER:
            return result
        time.sleep(0.2)
    return result


def test_commit_is_one_snapshot_of_exactly_the_voted_files(iceberg_table):
    t = iceberg_table
    vote = voted(t)
    assert vote.records == 8 and len(vote.payload["files"]) == 4  # 2 splits x 2 days
    assert t.rows() == 0 and t.batch_snapshots() == []  # nothing visible before the commit

    assert t.sink().verify(vote).outcome is Outcome.DONE
    result = t.sink().commit(vote)
    assert result.outcome is Outcome.DONE, result.detail
    assert t.batch_snapshots() == ["0000000007"]
    snapshot = t.table().current_snapshot()
    assert snapshot.summary["onceflow.pipeline"] == "p" and snapshot.summary["onceflow.attempt"] == "1"
    assert snapshot.summary["added-records"] == "8"
    scanned = t.table().scan().to_arrow()
    assert sorted(zip(scanned["split"].to_pylist(), scanned["i"].to_pylist())) == (
        [(0, i) for i in range(5)] + [(1, i) for i in range(3)])
    # The day partition prunes: a filter on one day reads that day's files only.
    one_day = t.table().scan(row_filter=f"day >= '{(DAY + dt.timedelta(days=1)).isoformat()}'").plan_files()
    assert len(list(one_day)) == 2
    # The failed attempt's file is gone; the voted ones stay.
    assert sorted(files_under(t, SEQ)) == sorted(f["path"] for f in vote.payload["files"])

    again = t.sink().commit(vote)
    assert again.outcome is Outcome.ALREADY_DONE, again.detail
    assert t.rows() == 8 and len(t.batch_snapshots()) == 1


@pytest.fixture
def armed():
    yield faults.arm
    faults.disarm()


@pytest.mark.parametrize("point, committed_after_crash", [
    ("iceberg.commit.before_snapshot", False), ("iceberg.commit.after_snapshot", True)])
def test_commit_resumes_after_a_crash_at_each_step(iceberg_table, armed, point, committed_after_crash):
    t = iceberg_table
    vote = voted(t)
    armed(point, "raise")
    first = t.sink().commit(vote)
    assert first.outcome is Outcome.FAILED and point in first.detail
    assert t.rows() == (8 if committed_after_crash else 0)  # all of the batch or none of it
    assert t.batch_snapshots() == (["0000000007"] if committed_after_crash else [])

    second = t.sink().commit(vote)
    assert second.outcome is (Outcome.ALREADY_DONE if committed_after_crash else Outcome.DONE), second.detail
    assert t.rows() == 8 and t.batch_snapshots() == ["0000000007"]  # exactly one snapshot
    assert sorted(files_under(t, SEQ)) == sorted(f["path"] for f in vote.payload["files"])


def test_a_lost_data_file_fails_verify_and_commit_loudly(iceberg_table):
    t = iceberg_table
    vote = voted(t)
    lost = vote.payload["files"][1]["path"]
    t.table().io.delete(lost)
    verdict = t.sink().verify(vote)
    assert verdict.outcome is Outcome.FAILED and lost in verdict.detail and "0000000007" in verdict.detail
    # A file lost after the decision: the commit refuses, and no snapshot names a file readers cannot read (I7).
    result = t.sink().commit(vote)
    assert result.outcome is Outcome.FAILED and lost in result.detail and "nothing was committed" in result.detail
    assert t.batch_snapshots() == [] and t.rows() == 0


def test_a_partition_spec_changed_since_the_files_were_written_fails_verify(iceberg_table):
    from pyiceberg.transforms import IdentityTransform

    t = iceberg_table
    vote = voted(t)
    with t.table().update_spec() as spec:
        spec.add_field("split", IdentityTransform(), "split")
    verdict = t.sink().verify(vote)
    assert verdict.outcome is Outcome.FAILED and "(the partitioning changed)" in verdict.detail
    assert t.sink().commit(vote).outcome is Outcome.FAILED and t.rows() == 0


def test_a_ledger_started_afresh_never_takes_an_earlier_ledgers_batch_for_its_own(iceberg_table):
    """Batch 7 of an earlier ledger is in the table; the new ledger's batch 7 (planned
    later) commits beside it, and aborting it leaves the earlier one's files alone."""
    t = iceberg_table
    assert t.sink().commit(voted(t, planned_at=PLANNED_AT - 86_400_000)).outcome is Outcome.DONE
    earlier_files = files_under(t, SEQ, PLANNED_AT - 86_400_000)
    plan = Plan(pipeline="p", batch_seq=SEQ, ranges=(), created_at_ms=PLANNED_AT)
    write(t, SEQ, 1, 0, 4)
    assert t.sink().abort(plan, []).outcome is Outcome.DONE
    assert files_under(t, SEQ) == [] and files_under(t, SEQ, PLANNED_AT - 86_400_000) == earlier_files

    result = t.sink().commit(voted(t, sizes=(2,)))
    assert result.outcome is Outcome.DONE, result.detail
    assert t.batch_snapshots() == ["0000000007", "0000000007"] and t.rows() == 8 + 2


def test_abort_before_the_table_exists_has_nothing_to_do(iceberg_table):
    t = iceberg_table
    t.identifier = t.identifier + "_never_created"
    result = t.sink().abort(Plan(pipeline="p", batch_seq=1, ranges=(), created_at_ms=PLANNED_AT), [])
    assert result.outcome is Outcome.ALREADY_DONE and "no table yet" in result.detail


def test_abort_deletes_every_attempt_and_refuses_a_committed_batch(iceberg_table):
    t = iceberg_table
    plan = Plan(pipeline="p", batch_seq=SEQ, ranges=(), created_at_ms=PLANNED_AT)
    voted(t, attempt=1)
    write(t, SEQ, 2, 0, 4)  # a second attempt that died before voting
    assert files_under(t, SEQ)

    assert t.sink().abort(plan, []).outcome is Outcome.DONE
    assert files_under(t, SEQ) == []
    assert t.sink().abort(plan, []).outcome is Outcome.ALREADY_DONE
    assert t.rows() == 0 and t.batch_snapshots() == []  # no file of an aborted batch is ever referenced

    vote = voted(t, attempt=3)
    assert t.sink().commit(vote).ok
    refused = t.sink().abort(plan, [vote])
    assert refused.outcome is Outcome.FAILED and "COMMIT" in refused.detail
    assert t.rows() == 8


def test_a_second_different_vote_for_a_committed_batch_fails(iceberg_table):
    t = iceberg_table
    assert t.sink().commit(voted(t, attempt=1)).outcome is Outcome.DONE
    result = t.sink().commit(voted(t, attempt=2))
    assert result.outcome is Outcome.FAILED and "I2" in result.detail
    assert t.rows() == 8 and len(t.batch_snapshots()) == 1


def test_a_replacing_batch_swaps_the_old_files_for_the_new_in_one_snapshot(iceberg_table):
    t = iceberg_table
    assert t.sink().commit(voted(t, seq=7, sizes=(5, 3))).ok
    assert t.sink().commit(voted(t, seq=8, sizes=(2,))).ok  # another interval: stays
    before = len(t.table().metadata.snapshots)

    result = t.sink().commit(voted(t, seq=9, sizes=(4, 4), replaces=7))
    assert result.outcome is Outcome.DONE and "replacing batch 0000000007" in result.detail, result.detail
    table = t.table()
    assert len(table.metadata.snapshots) == before + 1  # one snapshot, readers never see both or neither
    assert table.current_snapshot().summary["onceflow.replaces"] == "0000000007"
    assert table.current_snapshot().summary["deleted-records"] == "8"
    assert t.rows() == 2 + 8
    paths = {task.file.file_path for task in table.scan().plan_files()}
    assert not any(p.startswith(tables.batch_dir(table.location(), "p", "counts", 7, PLANNED_AT)) for p in paths)

    again = t.sink().commit(voted(t, seq=9, sizes=(4, 4), replaces=7))  # other files for committed batch 9: refused (I2)
    assert again.outcome is Outcome.FAILED and "I2" in again.detail and t.rows() == 10
    chained = t.sink().commit(voted(t, seq=10, sizes=(1,), replaces=9))  # the interval reprocessed once more
    assert chained.outcome is Outcome.DONE, chained.detail
    assert t.rows() == 2 + 1


def test_a_replaced_batch_whose_rows_were_rewritten_is_refused_before_the_decision(iceberg_table):
    """A compaction moved one of batch 7's files: removing its files would leave those
    rows beside the replacement's. verify refuses (the replacement is aborted and
    re-run), and a commit after the decision changes nothing."""
    t = iceberg_table
    assert t.sink().commit(voted(t, seq=7, sizes=(5, 3))).ok
    table = t.table()
    moved = next(task.file for task in table.scan().plan_files())
    copy = moved.file_path.replace("/a1/", "/compacted/")
    with table.io.new_input(moved.file_path).open() as source, table.io.new_output(copy).create() as target:
        target.write(source.read())
    from pyiceberg.manifest import DataFile

    rewritten = DataFile.from_args(_table_format_version=table.format_version, **{
        name: getattr(moved, name) for name in ("content", "file_format", "partition", "record_count",
                                                "file_size_in_bytes", "column_sizes", "value_counts",
                                                "null_value_counts", "nan_value_counts", "lower_bounds",
                                                "upper_bounds", "split_offsets", "sort_order_id", "equality_ids",
                                                "key_metadata")}, file_path=copy)
    rewritten.spec_id = moved.spec_id
    with table.transaction() as transaction, transaction.update_snapshot().overwrite() as rewrite:
        rewrite.delete_data_file(moved)
        rewrite.append_data_file(rewritten)
    assert t.rows() == 8

    replacement = voted(t, seq=9, sizes=(4,), replaces=7)
    verdict = t.sink().verify(replacement)
    assert verdict.outcome is Outcome.FAILED and "a rewrite (compaction" in verdict.detail, verdict.detail
    result = t.sink().commit(replacement)
    assert result.outcome is Outcome.FAILED and t.rows() == 8  # nothing half done, no duplicate


def test_racing_commits_of_one_batch_make_one_snapshot(iceberg_table):
    t = iceberg_table
    vote = voted(t)
    start = threading.Barrier(4)
    results = []

    def commit():
        sink = t.sink()
        start.wait()
        results.append(commit_until_settled(sink, vote))

    threads = [threading.Thread(target=commit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(r.ok for r in results) and len(results) == 4, [r.detail for r in results]
    assert sorted(r.outcome.value for r in results).count("done") == 1
    assert t.rows() == 8 and t.batch_snapshots() == ["0000000007"]


READER = """
import json, sys, time
from onceflow.sinks.iceberg import tables
properties, identifier, total = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
catalog = tables.open_catalog("onceflow_iceberg", properties)  # the SQL catalog keys tables by catalog name
seen, end = [catalog.load_table(identifier).scan().to_arrow().num_rows], time.monotonic() + 60
print("ready", flush=True)
while time.monotonic() < end and total not in seen:  # until every batch is seen
    try:
        seen.append(catalog.load_table(identifier).scan().to_arrow().num_rows)
    except Exception as exc:  # the SQLite catalog busy under a commit: read again
        if "locked" not in str(exc):
            raise
print(json.dumps(seen))
"""


def test_a_reader_scanning_while_batches_commit_sees_whole_batches_only(iceberg_table):
    """A reader in another process scans the table in a loop while 8 batches of
    different sizes commit: every count it sees is the sum of a prefix of them."""
    t = iceberg_table
    sizes = [3 + 5 * k for k in range(8)]
    votes = [voted(t, seq=100 + k, sizes=(n - n // 2, n // 2)) for k, n in enumerate(sizes)]
    reader = subprocess.Popen([sys.executable, "-c", READER, json.dumps(t.properties), t.identifier, str(sum(sizes))],
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "ready"
    for vote in votes:
        assert t.sink().commit(vote).ok
        time.sleep(0.2)  # room for the reader to scan between commits
    out, _ = reader.communicate(timeout=120)
    assert reader.returncode == 0
    seen = json.loads(out)
    prefix_sums = {sum(sizes[:k]) for k in range(len(sizes) + 1)}
    assert len(seen) > 10 and set(seen) <= prefix_sums, sorted(set(seen) - prefix_sums)
    assert len(set(seen)) >= 3, "the reader saw the table between commits"
    assert seen[-1] == sum(sizes) == t.rows()
