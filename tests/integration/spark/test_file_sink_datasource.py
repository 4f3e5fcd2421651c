"""The ``onceflow_files`` Spark data source: real Spark tasks stage, the vote
names exactly the committed task attempts, FileSink promotes them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from onceflow.sinks.files import FileSink, committed_files, layout, read_committed
from onceflow.storage import storage_for
from onceflow.storage import Storage
from onceflow.core.participant import Outcome
from onceflow.core.plan import Plan
from onceflow.sinks.files.data_source import FORMAT, register
from onceflow.sinks.votes import read_recorded_vote

from tests.support import ROOT


# HDFS in the slow set (5 to 10 s on 2 busy cores); its promotion is in make test (tests/integration/sinks/files).
@pytest.fixture(params=["local", "hadoop", pytest.param("hdfs", marks=pytest.mark.slow), "s3"])
def target(request, tmp_path, spark) -> tuple[str, dict[str, str], Storage]:
    """(sink URI, writer options for its storage, the storage as this process reads it).
    Options carry no secret: executors sign in with their own keys (spark.executorEnv).
    On HDFS the executors' Python workers reach the NameNode by the URI alone."""
    register(spark)
    if request.param == "local":
        return str(tmp_path / "sink"), {}, storage_for(str(tmp_path / "sink"))
    if request.param == "hadoop":
        return f"file://{tmp_path}/sink", {"storage": "hadoop"}, storage_for(f"file://{tmp_path}/sink", "hadoop")
    if request.param == "hdfs":
        storage = request.getfixturevalue("hdfs_storage")
        return f"{request.getfixturevalue('hdfs_cluster').uri}/warehouse/{tmp_path.name}", {}, storage
    from onceflow.storage.s3 import S3Storage

    storage = S3Storage(request.getfixturevalue("s3_endpoint"))
    return f"s3://{request.getfixturevalue('s3_bucket')}/sink", storage.options(), storage


def write(df, sink_uri: str, vote_path: str, extra: dict[str, str], seq: int = 5, attempt: int = 1) -> None:
    writer = df.write.format(FORMAT).mode("append")
    options = {"sink": "numbers", "path": sink_uri, "batch_seq": str(seq), "attempt": str(attempt),
               "vote_path": vote_path, **extra}
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def sink_for(sink_uri: str, storage: Storage) -> FileSink:
    return FileSink("numbers", sink_uri, storage)


def test_each_task_stages_one_file_and_the_job_votes_for_all(spark, target, tmp_path):
    sink_uri, extra, storage = target
    df = spark.range(0, 1000, numPartitions=4).selectExpr("id", "cast(id % 7 AS int) AS bucket")
    vote_path = str(tmp_path / "vote.json")
    write(df, sink_uri, vote_path, extra)

    vote = read_recorded_vote(vote_path)
    assert (vote.participant, vote.batch_seq, vote.attempt, vote.records) == ("numbers", 5, 1, 1000)
    assert sorted(f["split"] for f in vote.payload["files"]) == [0, 1, 2, 3]
    sink = sink_for(sink_uri, storage)
    assert committed_files(sink_uri, sink.storage) == []  # staged is invisible

    assert sink.verify(vote).outcome is Outcome.DONE
    assert sink.commit(vote).outcome is Outcome.DONE
    table = read_committed(sink_uri, sink.storage)
    assert sorted(table["id"].to_pylist()) == list(range(1000))
    if not sink_uri.startswith("s3://"):
        # A plain Spark reader of the sink sees the committed batch and no staging.
        assert spark.read.parquet(sink_uri).count() == 1000


def test_a_failed_job_votes_nothing_and_abort_leaves_no_staging(spark, tmp_path):
    register(spark)
    sink_uri, vote_path = str(tmp_path / "sink"), str(tmp_path / "vote.json")
    df = spark.range(0, 400, numPartitions=4).selectExpr("id", "1 / (id - 350) AS boom")
    spark.conf.set("spark.sql.ansi.enabled", "true")  # division by zero fails the task
    try:
        with pytest.raises(Exception, match="DIVIDE_BY_ZERO"):
            write(df, sink_uri, vote_path, {})
    finally:
        spark.conf.unset("spark.sql.ansi.enabled")
    assert read_recorded_vote(vote_path) is None
    sink = sink_for(sink_uri, storage_for(sink_uri))
    assert sink.abort(Plan("p", 5, ()), []).ok
    assert sink.storage.list_dir(layout.batch_staging(sink_uri, 5)) == {}
    assert committed_files(sink_uri) == []


def test_overwrite_mode_and_missing_options_fail_fast(spark, tmp_path):
    register(spark)
    df = spark.range(3)
    with pytest.raises(Exception, match="mode\\('append'\\)"):
        df.write.format(FORMAT).mode("overwrite").option("sink", "x").save(str(tmp_path))
    with pytest.raises(Exception, match="missing option\\(s\\) batch_seq, attempt"):
        df.write.format(FORMAT).mode("append").option("sink", "x").option("path", str(tmp_path)).save()
    with pytest.raises(Exception, match="give options .pipeline. and .deployment.*or .vote_path."):
        (df.write.format(FORMAT).mode("append").option("sink", "x").option("path", str(tmp_path))
           .option("batch_seq", "1").option("attempt", "1").save())


@pytest.mark.slow  # its own Spark process
def test_retried_task_attempts_never_duplicate_output(tmp_path):
    """Every task dies mid-file on attempt 0 and succeeds on attempt 1
    (local[2,3] allows retries, hence a process of its own): the vote lists
    one file per partition, all from attempt 1, and promotion yields each row
    exactly once although the dead attempts left valid Parquet files behind."""
    sink_uri, vote_path = str(tmp_path / "sink"), str(tmp_path / "vote.json")
    rows, partitions = 1000, 4
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "tests.integration.spark.retry_job", sink_uri, vote_path, str(rows), str(partitions)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    vote = read_recorded_vote(vote_path)
    files = vote.payload["files"]
    assert sorted(f["split"] for f in files) == list(range(partitions))
    assert len({f["task_attempt"] for f in files}) == partitions  # each voted file by a task attempt of its own
    staged = FileSink("numbers", sink_uri).storage.list_dir(layout.attempt_staging(sink_uri, 3, 1))
    orphans = set(staged) - {f["name"] for f in files}
    assert len(orphans) == partitions  # the dead first attempts' files are really there

    sink = FileSink("numbers", sink_uri)
    assert sink.commit(vote).outcome is Outcome.DONE
    ids = read_committed(sink_uri)["id"].to_pylist()
    assert sorted(ids) == list(range(rows))
    on_disk = sorted(p.name for p in (tmp_path / "sink" / "batch=0000000003").iterdir())
    assert on_disk == sorted([f["name"] for f in files] + ["_SUCCESS"])
