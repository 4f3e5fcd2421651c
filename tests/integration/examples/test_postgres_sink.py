"""The PostgreSQL table sink of examples/postgres_sink, a kind written against the public contract
alone and installed from a package of its own, on a real PostgreSQL server."""

from __future__ import annotations

import uuid

import pyarrow as pa
import psycopg
import pytest

from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.pipeline.runtime import Deployment
from onceflow.sinks.api import BatchId, Outcome, Plan
from onceflow.pipeline.spec import SinkSpec
from onceflow.testing.conformance import Held, SinkConformance, SparkSideConformance
from onceflow_postgres_sink import ids
from onceflow_postgres_sink.connection import env_var
from onceflow_postgres_sink.tables import create_tables, split_target
from onceflow_postgres_sink.writer import MarkerTaken, SplitAttempt, prepare_split, vote_for

CONN_ID = "onceflow_test_pg"
SCHEMA = pa.schema([("key", pa.string()), ("value", pa.int64())])


class PostgresHarness:
    """A fresh table, and the sink's Spark side (``prepare_split``) called split by split."""

    def __init__(self, server, splits: int = 2, warehouse: str | None = None):
        self.uri = server.uri()
        # Only the kit's Spark half asks for it: its ledger lives in the warehouse; a postgres output never asks Kafka.
        self.deployment = Deployment(warehouse, KafkaCluster("127.0.0.1:9")) if warehouse else None
        self.pipeline = f"p{uuid.uuid4().hex[:8]}"
        self.sink = SinkSpec("orders", "postgres", f"public.orders_{self.pipeline}", splits=splits,
                             options={"connection": CONN_ID})
        with psycopg.connect(self.uri, autocommit=True) as conn:
            create_tables(conn, self.sink.target, [("key", "string"), ("value", "bigint")])

    def pre_commit(self, batch_seq, attempt, rows, replaces=None, task_attempt=0):
        batch_id = str(BatchId(batch_seq))
        splits = [prepare_split(self.uri, self.sink.target, ["key", "value"],
                                [pa.RecordBatch.from_pylist(list(rows[i::self.sink.splits]), SCHEMA)],
                                SplitAttempt(self.pipeline, self.sink.name, batch_seq, batch_id, i, attempt, task_attempt))
                  for i in range(self.sink.splits)]
        return vote_for(self.sink.name, batch_seq, attempt, self.sink.target, splits, replaces)

    def held(self, batch_seq):
        """The batch's prepared transactions: PostgreSQL never ends one by itself."""
        prefix = ids.batch_prefix(self.pipeline, self.sink.name, batch_seq)
        return [Held(f"prepared transaction {gid}") for gid in self.prepared() if gid.startswith(prefix)]

    def visible(self):
        schema, table = split_target(self.sink.target)
        with psycopg.connect(self.uri, autocommit=True) as conn:
            return [(b, k, v) for k, v, b in conn.execute(
                psycopg.sql.SQL("SELECT key, value, onceflow_batch FROM {}").format(psycopg.sql.Identifier(schema, table)))]

    def participant(self):
        from onceflow.sinks import sink_kind

        return sink_kind("postgres").participant(type("Spec", (), {"name": self.pipeline}), self.sink, None)

    def job_failed(self, vote):
        with psycopg.connect(self.uri, autocommit=True) as conn:
            for split in vote.payload["splits"]:
                conn.tpc_rollback(split["gid"])

    def frame(self, spark, rows):
        return spark.createDataFrame(rows, "key string, value bigint")

    def prepared(self) -> list[str]:
        with psycopg.connect(self.uri, autocommit=True) as conn:
            return sorted(x.gtrid for x in conn.tpc_recover() if x.gtrid.startswith(f"onceflow:{self.pipeline}:"))


@pytest.fixture
def pg_connection(postgres_server, monkeypatch):
    """The sink's Airflow connection, as Airflow and Spark executors read it: from the environment."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", postgres_server.uri())


def executors_uri(server) -> str:
    """The connection's URI as Spark executors get it: without its password, which goes as PGPASSWORD
    (connection.py says why)."""
    return server.uri().replace(f":{server.password}@", "@")


@pytest.fixture
def pg_executors(spark, postgres_server, monkeypatch):
    """The connection as the Python workers of a data source registered from now on get it: what
    ``spark.executorEnv`` gives them (``SparkContext.environment``)."""
    environment = spark.sparkContext.environment
    monkeypatch.setitem(environment, env_var(CONN_ID), executors_uri(postgres_server))
    monkeypatch.setitem(environment, "PGPASSWORD", postgres_server.password)


class TestPostgresSinkConformance(SinkConformance):
    @pytest.fixture
    def sink_harness(self, postgres_server, pg_connection):
        return PostgresHarness(postgres_server)


class TestPostgresSparkSide(SparkSideConformance):
    @pytest.fixture
    def sink_harness(self, postgres_server, pg_connection, pg_executors, tmp_path):
        return PostgresHarness(postgres_server, warehouse=f"file://{tmp_path}/warehouse")


def test_a_retried_attempt_rolls_back_the_older_ones_so_it_never_waits_on_a_zombies_locks(postgres_server, pg_connection):
    harness = PostgresHarness(postgres_server, splits=1)
    harness.pre_commit(1, 1, [{"key": "a", "value": 1}])
    assert len(harness.prepared()) == 1
    vote = harness.pre_commit(1, 2, [{"key": "a", "value": 2}])
    assert harness.prepared() == [vote.payload["splits"][0]["gid"]]  # attempt 1's is gone, attempt 2's waits
    assert harness.participant().commit(vote).outcome is Outcome.DONE
    assert [row[1:] for row in harness.visible()] == [("a", 2)]


def test_a_marker_left_by_an_earlier_ledger_of_the_same_pipeline_name_is_never_reused(postgres_server, pg_connection):
    # A pipeline started over (a new warehouse, the same name and database) plans batch 1 again: its split's
    # id is the committed one's, whose marker tells that commit from a rollback. Reusing it would lie.
    harness = PostgresHarness(postgres_server, splits=1)
    assert harness.participant().commit(harness.pre_commit(1, 1, [{"key": "a", "value": 1}])).outcome is Outcome.DONE
    with pytest.raises(MarkerTaken, match=r"public.onceflow_prepared_splits already holds 'onceflow:p\w+:orders:b1:s0:a1.0'"
                                          r", the marker of a committed transaction of batch 1 from an earlier ledger"
                                          r".*give the pipeline a new name"):
        harness.pre_commit(1, 1, [{"key": "b", "value": 2}])
    assert [row[1:] for row in harness.visible()] == [("a", 1)] and harness.prepared() == []


def test_a_voted_transaction_rolled_back_behind_onceflow_fails_the_commit_loudly(postgres_server, pg_connection):
    harness = PostgresHarness(postgres_server)
    vote = harness.pre_commit(1, 1, [{"key": str(i), "value": i} for i in range(4)])
    with psycopg.connect(harness.uri, autocommit=True) as conn:  # an operator's ROLLBACK PREPARED
        conn.tpc_rollback(vote.payload["splits"][0]["gid"])
    participant = harness.participant()
    assert participant.verify(vote).outcome is Outcome.FAILED
    result = participant.commit(vote)
    assert result.outcome is Outcome.FAILED and "rolled back outside onceflow" in result.detail
    assert harness.visible() == []  # and nothing half-committed: the other split still waits
    assert len(harness.prepared()) == 1


def test_a_server_that_is_down_is_retry_later_and_the_commit_finishes_when_it_is_back(postgres_server, pg_connection, monkeypatch):
    harness = PostgresHarness(postgres_server)
    vote = harness.pre_commit(1, 1, [{"key": "a", "value": 1}, {"key": "b", "value": 2}])
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", "postgresql://onceflow@127.0.0.1:1/postgres")
    assert harness.participant().commit(vote).outcome is Outcome.RETRY_LATER
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", postgres_server.uri())
    assert harness.participant().commit(vote).outcome is Outcome.DONE
    assert sorted(r[1:] for r in harness.visible()) == [("a", 1), ("b", 2)]


TRANSFORM = '''
from pyspark.sql import functions as F


def orders(records, batch_id):
    return {"orders": records.select(F.col("key").cast("string").alias("key"), F.col("offset").alias("value"))}
'''


def test_a_kind_from_a_package_of_its_own_runs_a_batch_on_spark_where_only_the_shipped_zips_hold_it(
        one_kafka_broker, postgres_server, tmp_path, monkeypatch):
    """spark-submit as the DAG runs it, with a Python that has neither onceflow nor the postgres
    sink's package (only their metadata): the kind is found by its entry point, its code comes from
    the zips the DAG ships; the executors get the connection as AIRFLOW_CONN_* without its password,
    and the password as PGPASSWORD. The batch commits, and the table holds every input record once."""
    import os
    import subprocess

    from onceflow.spark.shipping import shipped_code
    from onceflow.kafka.admin import ensure_topics
    from onceflow.kafka.config import base_config
    from onceflow.pipeline.runtime import Deployment, PipelineRuntime
    from onceflow.pipeline.spec import PipelineSpec
    from tests.integration.spark.test_run_batch import job_summary, python_without_onceflow, spark_submit

    tag = uuid.uuid4().hex[:8]
    (tmp_path / "pg_transform.py").write_text(TRANSFORM)
    monkeypatch.syspath_prepend(str(tmp_path))  # the DAG's process imports the transform's package to ship it
    spec = PipelineSpec(f"pg-{tag}", (f"orders-{tag}",), "pg_transform:orders",
                        (SinkSpec("orders", "postgres", f"public.orders_{tag}", splits=2, options={"connection": CONN_ID}),))
    assert any("onceflow_postgres_sink/kind.py" in name for z in shipped_code(spec) for name in __import__("zipfile").ZipFile(z).namelist())
    config = one_kafka_broker.config()
    ensure_topics(config, [spec.topics[0]], partitions=2)
    from confluent_kafka import Producer

    producer = Producer(base_config(config))
    for i in range(300):
        producer.produce(spec.topics[0], key=f"order-{i}".encode(), value=b"{}", partition=i % 2)
    assert producer.flush(30) == 0
    runtime = PipelineRuntime(spec, Deployment(f"file://{tmp_path}/warehouse", one_kafka_broker))
    with runtime.offset_source() as source:
        plan = runtime.coordinator.plan_next(source, runtime.plan_config(), run_id="run-1")
    assert plan.records == 300

    python = python_without_onceflow(tmp_path)
    hidden = subprocess.run([str(python), "-c", "import onceflow_postgres_sink"], capture_output=True, text=True)
    assert "No module named 'onceflow_postgres_sink'" in hidden.stderr, hidden.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONCEFLOW_", "PYSPARK_", "SPARK_"))}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python), PGPASSWORD=postgres_server.password,
               **{env_var(CONN_ID): executors_uri(postgres_server)})
    result = job_summary(spark_submit(tmp_path, runtime, plan, env))
    assert (result["batch"], result["input_records"]) == (plan.batch_seq, 300)

    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", postgres_server.uri())
    assert runtime.coordinator.commit(plan.batch_seq).state.value == "committed"
    runtime.after_commit(plan)
    with postgres_server.connect(autocommit=True) as conn:
        rows = conn.execute(psycopg.sql.SQL("SELECT key, onceflow_batch FROM {}").format(
            psycopg.sql.Identifier("public", f"orders_{tag}"))).fetchall()
        lingering = [x.gtrid for x in conn.tpc_recover() if x.gtrid.startswith(f"onceflow:{spec.name}:")]
    assert sorted(k for k, _ in rows) == sorted(f"order-{i}" for i in range(300))
    assert {b for _, b in rows} == {plan.batch_id} and lingering == []


def test_a_zombie_killed_before_its_job_could_abort_leaves_nothing_prepared_once_the_batch_commits(postgres_server, pg_connection):
    """Attempt 1 prepares after attempt 2 voted, and dies before its Spark job's abort: the commit of
    attempt 2 leaves its transaction alone, and the step after the commit rolls it back."""
    harness = PostgresHarness(postgres_server)
    vote = harness.pre_commit(1, 2, [{"key": "a", "value": 2}])
    zombie = harness.pre_commit(1, 1, [{"key": "a", "value": 1}])
    participant = harness.participant()
    assert participant.commit(vote).outcome is Outcome.DONE
    assert sorted(harness.prepared()) == sorted(s["gid"] for s in zombie.payload["splits"])
    participant.after_commit(Plan(harness.pipeline, 1, ()))
    assert harness.prepared() == [] and [row[1:] for row in harness.visible()] == [("a", 2)]


def test_the_asset_of_a_postgres_output_names_its_connection_and_table_in_a_scheme_airflow_leaves_alone():
    from airflow.sdk import Asset

    from onceflow.sinks import sink_kind

    sink = SinkSpec("payments", "postgres", "shop.payments", options={"connection": "pg_shop"})
    uri = sink_kind("postgres").asset_uri(sink, "file:///w")
    assert Asset(uri).uri == uri == "x-onceflow-postgres://pg_shop/shop/payments"


def test_a_connection_in_airflows_json_form_keeps_its_tls_settings_and_never_needs_airflow(monkeypatch):
    from onceflow_postgres_sink.connection import conninfo

    monkeypatch.setenv("AIRFLOW_CONN_PG_SHOP", '{"conn_type": "postgres", "host": "db.internal", "port": 5433, '
                       '"login": "etl", "password": "p@ss word", "schema": "shop", '
                       '"extra": {"sslmode": "verify-full", "sslrootcert": "/etc/ca.pem"}}')
    assert conninfo("pg_shop") == ("postgresql://etl:p%40ss%20word@db.internal:5433/shop"
                                   "?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem")
