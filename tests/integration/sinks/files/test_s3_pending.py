"""Files on S3 are written as pending multipart uploads at their committed names and completed
by the commit: a reader sees nothing before it, the commit copies no byte and sends one
completion per file, and an abort (or a commit, for attempts no vote names) leaves no upload
pending: nothing of an aborted batch stays stored or billed. Against the S3 endpoint over HTTP."""

from __future__ import annotations

import uuid
from collections import Counter

import pyarrow as pa
import pytest

from onceflow.core.participant import Outcome
from onceflow.core.plan import OffsetRange, Plan
from onceflow.sinks.files import FileSink, committed_files, layout, read_committed
from onceflow.storage.s3 import S3Storage

SEQ = 3


@pytest.fixture
def sink(s3_endpoint, s3_bucket) -> FileSink:
    return FileSink("counts", f"s3://{s3_bucket}/warehouse/counts-{uuid.uuid4().hex[:6]}", S3Storage(s3_endpoint))


def rows(split: int, n: int) -> pa.Table:
    return pa.table({"split": [split] * n, "i": list(range(n))})


def requests(storage: S3Storage) -> Counter:
    """Every S3 operation this storage's client sends from now on, by name."""
    sent: Counter = Counter()
    storage.client.meta.events.register("before-call.s3.*", lambda model, **_: sent.update([model.name]))
    return sent


def test_pending_files_are_invisible_until_the_commit_completes_them_copying_nothing(sink):
    storage, batch_dir = sink.storage, layout.batch_dir(sink.sink_uri, SEQ)
    entries = [sink.stage(rows(split, 5), SEQ, 1, split) for split in range(3)]
    assert all(e.upload is not None and e.path == layout.join(batch_dir, e.name) for e in entries)
    vote = sink.vote_for(SEQ, 1, entries)
    assert storage.list_dir(batch_dir) == {} and committed_files(sink.sink_uri, storage) == []  # nothing to read yet
    assert sorted(storage.pending_names(batch_dir)) == sorted(e.name for e in entries)
    assert sink.verify(vote).outcome is Outcome.DONE

    sent = requests(storage)
    assert sink.commit(vote).outcome is Outcome.DONE
    assert sent["CompleteMultipartUpload"] == 3 and sent["CopyObject"] == 0 and sent["UploadPart"] == 0
    assert read_committed(sink.sink_uri, storage).num_rows == 15
    assert list(storage.pending_names(batch_dir)) == []
    assert sink.commit(vote).outcome is Outcome.ALREADY_DONE  # a second commit completes nothing twice


def test_a_commit_cut_after_completing_resumes_and_aborts_what_no_vote_names(sink):
    from onceflow.core import faults

    storage, batch_dir = sink.storage, layout.batch_dir(sink.sink_uri, SEQ)
    orphan = sink.stage(rows(0, 99), SEQ, 1, 0, task_attempt=0)   # a failed first task attempt
    other = sink.stage(rows(1, 99), SEQ, 2, 1)                     # a later attempt of the batch, never voted
    vote = sink.vote_for(SEQ, 1, [sink.stage(rows(0, 5), SEQ, 1, 0, task_attempt=1), sink.stage(rows(1, 3), SEQ, 1, 1)])
    faults.arm("files.commit.after_publish", "raise")
    try:
        assert sink.commit(vote).outcome is Outcome.FAILED  # completed, no manifest: still invisible
    finally:
        faults.disarm()
    assert committed_files(sink.sink_uri, storage) == []
    assert sink.commit(vote).outcome is Outcome.DONE
    assert read_committed(sink.sink_uri, storage).num_rows == 8
    assert orphan.name not in storage.list_dir(batch_dir) and other.name not in storage.list_dir(batch_dir)
    assert list(storage.pending_names(batch_dir)) == []


def test_an_abort_leaves_no_upload_pending_voted_or_not(sink):
    storage, batch_dir = sink.storage, layout.batch_dir(sink.sink_uri, SEQ)
    voted = [sink.stage(rows(split, 4), SEQ, 1, split) for split in range(2)]
    sink.vote_for(SEQ, 1, voted)
    sink.stage(rows(0, 4), SEQ, 2, 0)  # an attempt that never voted
    assert len(list(storage.pending_names(batch_dir))) == 3
    plan = Plan("p", SEQ, (OffsetRange("t", 0, 0, 8),))
    assert sink.abort(plan, []).outcome is Outcome.DONE
    assert list(storage.pending_names(batch_dir)) == [] and storage.list_tree(sink.sink_uri) == []
    assert sink.abort(plan, []).outcome is Outcome.ALREADY_DONE


def test_a_vote_whose_upload_was_aborted_behind_its_back_is_refused_and_never_reported_committed(sink):
    entries = [sink.stage(rows(split, 4), SEQ, 1, split) for split in range(2)]
    vote = sink.vote_for(SEQ, 1, entries)
    sink.discard(entries[1])  # e.g. a bucket lifecycle rule aborted it
    verdict = sink.verify(vote)
    assert verdict.outcome is Outcome.FAILED and entries[1].path in verdict.detail
    result = sink.commit(vote)
    assert result.outcome is Outcome.FAILED and "lost" in result.detail
    assert committed_files(sink.sink_uri, sink.storage) == []  # I7: never half-visible, never "success"
