"""End-to-end fixtures: the clickstream DAG in a real Airflow against a fresh
broker per test (the DAG's topic names are fixed, so tests must not share one).

The DAG is built with ``ONCEFLOW_SCHEDULE=none``: a running scheduler must not
start cron runs of its own between the runs a test triggers.

The Iceberg tables are in the dev kit's REST catalog, as in the demo and the
chaos runs (the warehouses here are local): one server per session, emptied
for each world, since the DAGs name fixed tables."""

from __future__ import annotations

import shutil
import time
import uuid
from contextlib import contextmanager

import pytest

from onceflow.sinks.iceberg import tables
from onceflow.storage.local import local_path
from onceflow_devkit.airflow_env import onceflow_airflow
from onceflow_devkit.services.iceberg_catalog import CONN_ID, embedded_catalogs
from onceflow_devkit.services.rest_catalog import RestCatalog, start_rest_catalog
from onceflow.kafka.admin import ensure_topics
from onceflow_examples.clickstream import CLICKSTREAM, CLICKSTREAM_HOURLY
from onceflow_examples.clickstream_data import generate, produce
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow_devkit.services.kafka_broker import DEFAULT_BROKER, start_broker
from onceflow_devkit.services.kafka_security import SecuredKafka, Security
from onceflow_devkit.services.process import ManagedProcess
from tests.conftest import TEST_HOME


class ClickstreamWorld:
    """A broker, a warehouse and an Airflow home for one test."""

    def __init__(self, broker, warehouse: str, airflow, s3=None, catalog: RestCatalog | None = None):
        """``catalog``: the REST catalog the Airflow connection names (None: the warehouse's SQL catalog)."""
        self.broker = broker
        self.warehouse = warehouse
        self.airflow = airflow
        self.catalogs = embedded_catalogs(warehouse, s3, rest=catalog)
        self.runtime = PipelineRuntime(CLICKSTREAM, Deployment(warehouse, broker, s3, self.catalogs))

    def produce(self, n: int, seed: int = 0, malformed_ratio: float = 0.1) -> int:
        return produce(self.broker.config(), "clicks", generate(n, seed=seed, malformed_ratio=malformed_ratio))

    @contextmanager
    def faults(self, spec: str):
        """Arm ``ONCEFLOW_FAULTS=spec`` for the Airflow processes started inside
        the block (each ``dags_test`` is one; a running server keeps its env)."""
        env = self.airflow.extra_env
        self.airflow.extra_env = {**env, "ONCEFLOW_FAULTS": spec}
        try:
            yield
        finally:
            self.airflow.extra_env = env

    def visible(self, topic: str, timeout_s: float = 30.0) -> int:
        """Records a plain read_committed consumer (what a downstream user runs) sees in ``topic``."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer(
            self.broker.config(
                **{"group.id": f"e2e-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed",
                   "enable.auto.commit": False, "enable.partition.eof": True}
            )
        )
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
            at_end, seen, deadline = set(), 0, time.monotonic() + timeout_s
            while len(at_end) < len(partitions):
                assert time.monotonic() < deadline, f"{topic}: no end of partition within {timeout_s} s"
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                if msg.error() is None:
                    seen += 1
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                else:
                    raise AssertionError(f"reading {topic}: {msg.error()}")
            return seen
        finally:
            consumer.close()

    def audit(self, spark_reads_tables: bool = False):
        from onceflow_devkit.audit.clickstream_audit import audit_clickstream

        return audit_clickstream(self.runtime, spark_reads_tables=spark_reads_tables)


@pytest.fixture(scope="session")
def e2e_rest_catalog(tmp_path_factory) -> RestCatalog:
    """The Airflow system tests' own REST catalog: each world empties it (``emptied``), so no other
    test's table may be in it."""
    proc = ManagedProcess("e2e-iceberg-rest", TEST_HOME / "e2e-iceberg-rest").reset()
    catalog = start_rest_catalog(proc, f"file://{tmp_path_factory.mktemp('e2e-lake')}", die_with_parent=True)
    yield catalog
    proc.stop(grace=5)


def emptied(catalog: RestCatalog) -> RestCatalog:
    """``catalog`` without any table, their files deleted: a world's DAG creates its tables afresh."""
    rest = tables.open_catalog(CONN_ID, catalog.properties())
    for namespace in rest.list_namespaces():
        for identifier in rest.list_tables(namespace):
            location = rest.load_table(identifier).location()
            rest.drop_table(identifier)
            shutil.rmtree(local_path(location), ignore_errors=True)
    return catalog


def refused_runs(api, dag_id: str, confs: list[dict], timeout: float = 300.0) -> dict[str, str]:
    """Trigger a run per conf; each must fail at its plan task, before anything is planned, and its
    rollback, with nothing to undo, succeed. Returns run id -> the plan task's log (the refusal names
    what was wrong)."""
    runs = [api.trigger(dag_id, conf=conf) for conf in confs]
    logs = {}
    for run_id in runs:
        assert api.wait_for_run(dag_id, run_id, timeout=timeout) == "failed", api.explain(dag_id, run_id)
        states = api.task_states(dag_id, run_id)
        assert states == {"plan": "failed", "spark": "upstream_failed", "commit": "upstream_failed",
                          "rollback": "success"}, (states, api.explain(dag_id, run_id))
        logs[run_id] = api.task_log(dag_id, run_id, "plan")
    return logs


HOUR_MS = 3_600_000


def hour_with_room(seconds: float) -> int:
    """The start of the current hour (epoch ms), once at least ``seconds`` of it are left: a test that
    stamps its input by the hour must not see the hour turn, or the scheduler starts one more run."""
    left = HOUR_MS - time.time() * 1000 % HOUR_MS
    if left < seconds * 1000:
        time.sleep(left / 1000 + 1)
    return int(time.time() * 1000) // HOUR_MS * HOUR_MS


@contextmanager
def broker_with_topics(secure: bool = False):
    """A fresh broker with the clickstream pipelines' topics, stopped on exit. ``secure``: on SASL_SSL with
    the ACL authorizer and no ACL yet, yielded as a SecuredKafka (its ``broker`` the dev kit admin's)."""
    proc = ManagedProcess(f"e2e-kafka-{uuid.uuid4().hex[:6]}", TEST_HOME / f"e2e-{uuid.uuid4().hex[:6]}").reset()
    broker = start_broker(DEFAULT_BROKER, proc, die_with_parent=True, secure=secure)
    outputs = [s.target for spec in (CLICKSTREAM, CLICKSTREAM_HOURLY) for s in spec.sinks if s.kind == "kafka"]
    ensure_topics(broker.config(), ["clicks", *outputs])
    try:
        yield SecuredKafka(broker, Security(str(proc.directory / "security"))) if secure else broker
    finally:
        proc.stop(grace=2)


def make_world(broker, root, postgres, extra_env=None, spark_connect=None, celery=None, *,
               catalog: RestCatalog) -> ClickstreamWorld:
    """The clickstream DAG in an Airflow home under ``root`` (its metadata database on ``postgres``),
    on a local warehouse, its tables in ``catalog`` (e2e_rest_catalog, emptied first).
    ``spark_connect``: a Spark Connect server the spark tasks use instead of spark-submit;
    ``celery``: a Redis server, the broker of a CeleryExecutor with two workers."""
    warehouse = f"file://{root}/warehouse"
    airflow = onceflow_airflow(root / "airflow", broker, warehouse, spark_connect=spark_connect, postgres=postgres,
                               celery=celery, iceberg_rest=emptied(catalog),
                               extra_env={"ONCEFLOW_SCHEDULE": "none", **(extra_env or {})})
    airflow.migrate()
    return ClickstreamWorld(broker, warehouse, airflow, catalog=catalog)


@pytest.fixture
def fresh_broker():
    with broker_with_topics() as broker:
        yield broker


@pytest.fixture
def world(fresh_broker, tmp_path, postgres_server, e2e_rest_catalog) -> ClickstreamWorld:
    return make_world(fresh_broker, tmp_path, postgres_server, catalog=e2e_rest_catalog)
