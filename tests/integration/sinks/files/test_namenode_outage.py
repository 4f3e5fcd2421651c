"""A file sink on HDFS while its NameNode cannot write: the commit is retried later, never failed.

A NameNode is read-only in safe mode (while it starts, until its DataNodes report; or put there
by an operator), and a killed one answers nothing. Either way the batch's COMMIT stands: the
commit must come back as RETRY_LATER, and complete once the NameNode serves again.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager

import pyarrow as pa
import pytest

from onceflow.sinks.files import FileSink, committed_files, read_committed, write_staged_parquet
from onceflow.core.participant import Outcome
from onceflow_devkit.services.hdfs import start_hdfs
from onceflow_devkit.services.process import ManagedProcess
from tests.support import hdfs_client_storage

SEQ = 3


def staged_vote(sink: FileSink):
    entries = [write_staged_parquet(pa.table({"split": [split] * 4, "i": list(range(4))}), sink.staging_uri(SEQ, 1),
                                    split, sink.storage) for split in (0, 1)]
    return sink.vote_for(SEQ, 1, entries)


@contextmanager
def safe_mode(spark, uri: str):
    """The NameNode at ``uri`` in safe mode (``hdfs dfsadmin -safemode enter``), left on exit."""
    jvm = spark.sparkContext._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI(uri), spark.sparkContext._jsc.hadoopConfiguration())
    action = jvm.org.apache.hadoop.hdfs.protocol.HdfsConstants.SafeModeAction
    fs.setSafeMode(action.SAFEMODE_ENTER)
    try:
        yield
    finally:
        fs.setSafeMode(action.SAFEMODE_LEAVE)


def test_a_commit_while_the_namenode_is_in_safe_mode_is_retried_later_then_done(spark, hdfs_cluster, hdfs_storage):
    uri = f"{hdfs_cluster.uri}/warehouse/safe-mode-{uuid.uuid4().hex[:6]}"
    sink = FileSink("counts", uri, hdfs_storage)
    vote = staged_vote(sink)

    with safe_mode(spark, hdfs_cluster.uri):
        result = sink.commit(vote)
        assert result.outcome is Outcome.RETRY_LATER, result.detail
        assert "safe mode" in result.detail
    assert committed_files(uri, hdfs_storage) == []

    assert sink.commit(vote).outcome is Outcome.DONE
    assert sorted(read_committed(uri, hdfs_storage)["split"].to_pylist()) == [0] * 4 + [1] * 4
    assert sink.commit(vote).outcome is Outcome.ALREADY_DONE


@pytest.mark.slow  # a cluster of its own, started twice
def test_a_commit_while_the_namenode_is_down_is_retried_later_then_done_after_its_restart(spark, tmp_path):
    namenode = ManagedProcess("hdfs-namenode", tmp_path / "namenode").reset()
    datanode = ManagedProcess("hdfs-datanode", tmp_path / "datanode").reset()
    cluster = start_hdfs(namenode, datanode, die_with_parent=True)
    try:
        storage = hdfs_client_storage(spark, cluster, tmp_path / "client")
        uri = f"{cluster.uri}/warehouse/killed"
        sink = FileSink("counts", uri, storage)
        vote = staged_vote(sink)

        namenode.kill()
        for _ in range(2):  # the first call meets the dropped connection, the next a refused one
            result = sink.commit(vote)
            assert result.outcome is Outcome.RETRY_LATER, result.detail

        cluster.stop()
        cluster = start_hdfs(namenode, datanode, die_with_parent=True)  # same data, same port
        assert uri.startswith(cluster.uri)
        assert sink.commit(vote).outcome is Outcome.DONE
        assert read_committed(uri, storage).num_rows == 8
    finally:
        cluster.stop()
