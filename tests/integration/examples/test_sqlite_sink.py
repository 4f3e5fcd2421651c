"""The SQLite table sink of examples/sqlite_sink, the smallest complete kind, under the conformance kit.

``SqliteHarness`` is the whole of what a kind's author writes to run the kit
(docs/writing-a-sink.md shows it); the kit's own tests break it on purpose
(tests/integration/sinks/test_conformance_kit.py).
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import uuid
from contextlib import closing
from pathlib import Path

import pyarrow as pa
import pytest

from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.pipeline.runtime import Deployment
from onceflow.pipeline.spec import PipelineSpec, SinkSpec
from onceflow.sinks import sink_kind
from onceflow.sinks.api import BatchId, ConfigurationError
from onceflow.testing.conformance import Held, SinkConformance, SparkSideConformance
from onceflow_sqlite_sink.table import batch_prefix, create_tables, stage_id, stage_split, vote_for

SCHEMA = pa.schema([("key", pa.string()), ("value", pa.int64())])


class SqliteHarness:
    """A fresh database file, and the kind's Spark side (``stage_split``) called split by split, as its
    Spark tasks call it; read back with plain SQL, as any reader would."""

    def __init__(self, directory: Path, splits: int = 2):
        self.pipeline = f"p{uuid.uuid4().hex[:8]}"
        self.database = str(directory / f"{self.pipeline}.db")
        self.sink = SinkSpec("counts", "sqlite", "counts", splits=splits, options={"database": self.database})
        create_tables(self.database, "counts", ["key", "value"])
        # The ledger of the kit's Spark half lives in the warehouse; an SQLite output never asks Kafka.
        self.deployment = Deployment(f"file://{directory}/warehouse", KafkaCluster("127.0.0.1:9"))

    def pre_commit(self, batch_seq, attempt, rows, replaces=None, task_attempt=0):
        splits = [stage_split(self.database, "counts", ["key", "value"],
                              [pa.RecordBatch.from_pylist(list(rows[i::self.sink.splits]), SCHEMA)], str(BatchId(batch_seq)),
                              i, stage_id(self.pipeline, "counts", batch_seq, i, attempt, task_attempt))
                  for i in range(self.sink.splits)]
        return vote_for("counts", batch_seq, attempt, self.database, "counts", splits, replaces)

    def visible(self):
        with closing(sqlite3.connect(self.database)) as conn:
            return [(b, k, v) for k, v, b in conn.execute("SELECT key, value, onceflow_batch FROM counts")]

    def held(self, batch_seq):
        prefix = batch_prefix(self.pipeline, "counts", batch_seq)
        with closing(sqlite3.connect(self.database)) as conn:
            return [Held(f"{n} staged row(s) of {stage}") for stage, n in conn.execute(
                "SELECT onceflow_stage, count(*) FROM counts_staged WHERE substr(onceflow_stage, 1, ?) = ? "
                "GROUP BY onceflow_stage", [len(prefix), prefix])]

    def participant(self):
        return sink_kind("sqlite").participant(PipelineSpec(self.pipeline, ("t",), "m:f", (self.sink,)), self.sink, None)

    def job_failed(self, vote):
        pass  # the data source's abort leaves the staged rows to the rollback task

    def frame(self, spark, rows):
        return spark.createDataFrame(rows, "key string, value bigint")


@pytest.fixture
def database_dir(tmp_path):
    """Where a test's databases live: in memory where the machine has a tmpfs, on which a commit's fsync
    costs nothing (on disk each transaction took about 20 ms, and a run of the kit makes hundreds)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=shm) as directory:
        yield Path(directory)


class TestSqliteSinkConformance(SinkConformance):
    @pytest.fixture
    def sink_harness(self, database_dir):
        return SqliteHarness(database_dir)


class TestSqliteSparkSide(SparkSideConformance):
    sink_harness = TestSqliteSinkConformance.sink_harness


def test_an_sqlite_output_names_its_file_and_table_in_an_asset_airflow_takes_as_it_is(tmp_path):
    from airflow.sdk import Asset

    sink = SinkSpec("counts", "sqlite", "counts", options={"database": "/data/counts.db"})
    uri = sink_kind("sqlite").asset_uri(sink, "file:///w")
    assert Asset(uri).uri == uri == "x-onceflow-sqlite://localhost/data/counts.db#counts"


def test_a_relative_database_path_is_refused_naming_the_option():
    with pytest.raises(ConfigurationError, match="option 'database' must be the absolute path"):
        SinkSpec("counts", "sqlite", "counts", options={"database": "counts.db"})
