"""The file sink participant on local, Hadoop (file:// and HDFS) and S3 (moto over HTTP) storage.

Each test stages real Parquet files, drives the participant the way the
coordinator will, and then reads back what a reader of the committed layout
sees.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest

from onceflow.sinks.files import FileEntry, FileSink, committed_files, committed_manifests, read_committed, write_staged_parquet
from onceflow.core import faults
from onceflow.sinks.files import layout
from onceflow.core.participant import Outcome, Vote
from onceflow.core.plan import Plan

SEQ = 7


def rows(split: int, n: int) -> pa.Table:
    return pa.table({"split": [split] * n, "i": list(range(n))})


def stage(sink: FileSink, attempt: int, split: int, n: int, task_attempt: int = 0):
    """As the data source stages: on S3 a pending upload at the committed name, elsewhere a staged file."""
    return sink.stage(rows(split, n), SEQ, attempt, split, task_attempt=task_attempt)


def staged_vote(sink: FileSink, attempt: int = 1) -> tuple[Vote, list]:
    """Splits 0 and 1 voted; split 0 also left an orphan from a failed first task attempt."""
    orphan = stage(sink, attempt, 0, 99, task_attempt=0)
    entries = [stage(sink, attempt, 0, 5, task_attempt=1), stage(sink, attempt, 1, 3)]
    return sink.vote_for(SEQ, attempt, entries), [orphan]


def test_commit_promotes_exactly_the_voted_files(sink_root):
    uri, storage = sink_root
    sink = FileSink("counts", uri, storage)
    vote, (orphan,) = staged_vote(sink)
    assert vote.records == 8

    assert committed_files(uri, storage) == []  # I4: nothing visible before commit
    assert sink.verify(vote).outcome is Outcome.DONE
    result = sink.commit(vote)
    assert result.outcome is Outcome.DONE, result.detail

    table = read_committed(uri, storage)
    assert sorted(zip(table["split"].to_pylist(), table["i"].to_pylist())) == [(0, i) for i in range(5)] + [
        (1, i) for i in range(3)
    ]
    batch_dir = layout.batch_dir(uri, SEQ)
    assert sorted(storage.list_dir(batch_dir)) == sorted([e["name"] for e in vote.payload["files"]] + ["_SUCCESS"])
    assert orphan.name not in storage.list_dir(batch_dir)
    assert storage.list_dir(layout.batch_staging(uri, SEQ)) == {}

    (manifest,) = committed_manifests(uri, storage)
    assert (manifest.batch_seq, manifest.attempt, manifest.rows) == (SEQ, 1, 8)
    for f in manifest.files:
        data = storage.read_bytes(layout.join(batch_dir, f["name"]))
        assert (len(data), hashlib.sha256(data).hexdigest()) == (f["size"], f["sha256"])

    again = sink.commit(vote)
    assert again.outcome is Outcome.ALREADY_DONE, again.detail
    assert read_committed(uri, storage).num_rows == 8


def test_a_lost_staged_file_fails_verify_and_commit_loudly(sink_root):
    uri, storage = sink_root
    sink = FileSink("counts", uri, storage)
    vote, _ = staged_vote(sink)
    lost = vote.payload["files"][1]["path"]
    sink.discard(FileEntry.from_dict(vote.payload["files"][1]))  # deleted, or on S3 its pending upload aborted

    verdict = sink.verify(vote)
    assert verdict.outcome is Outcome.FAILED
    assert lost in verdict.detail and layout.batch_id(SEQ) in verdict.detail
    result = sink.commit(vote)
    assert result.outcome is Outcome.FAILED and "lost" in result.detail
    assert committed_files(uri, storage) == []  # I7: never half-visible, never "success"


@pytest.fixture
def armed():
    yield faults.arm
    faults.disarm()


@pytest.mark.parametrize(
    "point, visible_after_crash",
    [("files.commit.before_publish", 0), ("files.commit.after_publish", 0), ("files.commit.after_manifest", 2)],
)
def test_commit_resumes_after_a_crash_at_each_step(sink_root, armed, point, visible_after_crash):
    uri, storage = sink_root
    sink = FileSink("counts", uri, storage)
    vote, _ = staged_vote(sink)
    armed(point, "raise")
    first = sink.commit(vote)
    assert first.outcome is Outcome.FAILED and point in first.detail
    assert len(committed_files(uri, storage)) == visible_after_crash  # all or nothing, by the manifest

    second = sink.commit(vote)
    assert second.outcome is (Outcome.ALREADY_DONE if visible_after_crash else Outcome.DONE), second.detail
    assert read_committed(uri, storage).num_rows == 8
    assert storage.list_dir(layout.batch_staging(uri, SEQ)) == {}


def test_abort_removes_every_attempt_and_refuses_a_committed_batch(sink_root):
    uri, storage = sink_root
    sink = FileSink("counts", uri, storage)
    plan = Plan(pipeline="p", batch_seq=SEQ, ranges=())
    staged_vote(sink, attempt=1)
    stage(sink, 2, 0, 4)  # a second attempt that died before voting

    assert sink.abort(plan, []).outcome is Outcome.DONE
    assert storage.list_dir(layout.batch_staging(uri, SEQ)) == {}
    assert sink.abort(plan, []).outcome is Outcome.ALREADY_DONE
    assert committed_files(uri, storage) == []

    vote, _ = staged_vote(sink, attempt=3)
    assert sink.commit(vote).ok
    refused = sink.abort(plan, [vote])
    assert refused.outcome is Outcome.FAILED and "COMMIT" in refused.detail
    assert read_committed(uri, storage).num_rows == 8


def test_a_second_different_vote_for_a_committed_batch_fails(sink_root):
    uri, storage = sink_root
    sink = FileSink("counts", uri, storage)
    first, _ = staged_vote(sink, attempt=1)
    assert sink.commit(first).outcome is Outcome.DONE
    other, _ = staged_vote(sink, attempt=2)
    result = sink.commit(other)
    assert result.outcome is Outcome.FAILED and "I2" in result.detail
    assert read_committed(uri, storage).num_rows == 8


def test_an_empty_batch_commits_an_empty_manifest(sink_root):
    uri, storage = sink_root
    sink = FileSink("counts", uri, storage)
    vote = sink.vote_for(SEQ, 1, [])
    assert sink.verify(vote).outcome is Outcome.DONE
    assert sink.commit(vote).outcome is Outcome.DONE
    (manifest,) = committed_manifests(uri, storage)
    assert manifest.files == () and manifest.rows == 0


def test_vote_refuses_two_files_for_one_split(tmp_path):
    sink = FileSink("counts", str(tmp_path / "sink"))
    with pytest.raises(ValueError, match=r"splits \[0\].*duplicates"):
        sink.vote_for(SEQ, 1, [stage(sink, 1, 0, 2), stage(sink, 1, 0, 2, task_attempt=1)])


def test_a_vote_for_another_sink_is_refused(tmp_path):
    vote = FileSink("a", str(tmp_path / "a")).vote_for(SEQ, 1, [])
    result = FileSink("b", str(tmp_path / "b")).commit(vote)
    assert result.outcome is Outcome.FAILED and "wrong participant" in result.detail


def test_a_zombie_file_staged_after_promotion_is_never_published(sink_root, armed):
    uri, storage = sink_root
    sink = FileSink("counts", uri, storage)
    vote, _ = staged_vote(sink)
    armed("files.commit.after_publish", "raise")
    assert sink.commit(vote).outcome is Outcome.FAILED
    zombie = stage(sink, 1, 1, 50, task_attempt=7)  # a speculative attempt still running

    assert sink.commit(vote).outcome is Outcome.DONE
    assert zombie.name not in storage.list_dir(layout.batch_dir(uri, SEQ))
    assert read_committed(uri, storage).num_rows == 8


def test_a_replacing_batch_takes_the_place_of_the_one_it_names_and_readers_never_see_both(sink_root, armed):
    """A reprocessed interval: batch SEQ + 1 replaces committed batch SEQ. Readers switch
    from one to the other at the new manifest, also when the commit dies right after
    writing it; the commit run again removes the old batch."""
    uri, storage = sink_root
    sink = FileSink("counts", uri, storage)
    old, _ = staged_vote(sink)
    assert sink.commit(old).outcome is Outcome.DONE
    assert read_committed(uri, storage).num_rows == 8

    new_seq = SEQ + 1
    entries = [write_staged_parquet(rows(split, 4), sink.staging_uri(new_seq, 1), split, storage) for split in (0, 1)]
    replacing = sink.vote_for(new_seq, 1, entries, replaces=SEQ)
    assert read_committed(uri, storage).num_rows == 8  # staged: the old batch is still the committed one
    armed("files.commit.before_retract", "raise")
    first = sink.commit(replacing)
    assert first.outcome is Outcome.FAILED and "files.commit.before_retract" in first.detail
    assert storage.read_bytes(layout.manifest_path(uri, SEQ)) is not None  # the old batch is still there...
    assert [m.batch_seq for m in committed_manifests(uri, storage)] == [new_seq]  # ...but no reader sees it
    assert read_committed(uri, storage).num_rows == 8 and set(read_committed(uri, storage)["i"].to_pylist()) == {0, 1, 2, 3}

    again = sink.commit(replacing)
    assert again.outcome is Outcome.ALREADY_DONE, again.detail
    assert storage.list_dir(layout.batch_dir(uri, SEQ)) == {}  # the replaced batch is gone, manifest and files
    assert [m.replaces for m in committed_manifests(uri, storage)] == [SEQ]


def test_a_column_added_between_batches_reads_as_null_in_the_earlier_ones(tmp_path):
    from onceflow.storage.local import LocalStorage

    uri, storage = str(tmp_path / "sink"), LocalStorage()
    sink = FileSink("counts", uri, storage)
    before = write_staged_parquet(pa.table({"page": ["a", "b"], "views": [1, 2]}), sink.staging_uri(1, 1), 0, storage)
    after = write_staged_parquet(pa.table({"page": ["c"], "views": [3], "country": ["fr"]}), sink.staging_uri(2, 1), 0,
                                 storage)
    for seq, entry in ((1, before), (2, after)):
        assert sink.commit(sink.vote_for(seq, 1, [entry])).outcome is Outcome.DONE

    table = read_committed(uri, storage)
    assert table.column_names == ["page", "views", "country"]
    assert table.to_pylist() == [{"page": "a", "views": 1, "country": None}, {"page": "b", "views": 2, "country": None},
                                 {"page": "c", "views": 3, "country": "fr"}]
