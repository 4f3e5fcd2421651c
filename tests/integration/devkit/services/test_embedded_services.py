"""Each embedded service works over its socket (issue: foundation)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS, SURVIVES_SIGKILL
from onceflow_devkit.smoke import kafka_round_trip, s3_round_trip, spark_parquet_round_trip
from tests.support import require


def test_transactional_produce_then_read_committed_sees_every_committed_record(kafka_broker):
    trip = kafka_round_trip(kafka_broker, records=20)
    committed_seen = [v for v in trip.read_committed_values if v in trip.committed_values]
    assert sorted(committed_seen) == sorted(trip.committed_values)


def test_read_committed_hides_aborted_transaction(kafka_broker):
    require(kafka_broker, HIDES_ABORTED_RECORDS)
    trip = kafka_round_trip(kafka_broker, records=20)
    assert sorted(trip.read_committed_values) == sorted(trip.committed_values)
    assert not set(trip.aborted_values) & set(trip.read_committed_values)


def test_s3_conditional_put_on_existing_key_answers_412(s3_endpoint, s3_bucket):
    trip = s3_round_trip(s3_endpoint, bucket=s3_bucket)
    assert trip.second_conditional_put_status == 412
    assert trip.read_back == b"first"


def test_spark_writes_parquet_that_pyarrow_reads(spark, tmp_path):
    written, read = spark_parquet_round_trip(spark, tmp_path / "out.parquet", rows=5000)
    assert (written, read) == (5000, 5000)
    pages = set(pq.read_table(str(tmp_path / "out.parquet")).column("page").to_pylist())
    assert pages == {f"/p{i}" for i in range(7)}


def test_spark_python_workers_run_the_venv_python(spark):
    executables = set(spark.sparkContext.parallelize(range(4), 2).map(lambda _: __import__("sys").executable).collect())
    assert executables == {sys.executable}


def test_spark_standalone_cluster_has_its_worker_registered_on_loopback(spark_standalone):
    status = spark_standalone.status()
    assert status["status"] == "ALIVE" and spark_standalone.master_url.startswith("spark://127.0.0.1:")
    assert [(w["host"], w["state"], w["cores"], w["memory"]) for w in status["workers"]] == [("127.0.0.1", "ALIVE", 2, 2048)]


def test_airflow_parses_the_project_dags_and_a_missing_warehouse_is_named(airflow_home):
    airflow = str(Path(sys.executable).parent / "airflow")

    def dags_list(**env):
        return subprocess.run(
            [airflow, "dags", "list", "--local", "--output", "json"],
            env={**airflow_home, **env}, capture_output=True, text=True, timeout=300,
        )

    ok = dags_list(ONCEFLOW_WAREHOUSE="file:///tmp/onceflow-parse-check")
    assert ok.returncode == 0, ok.stderr
    # Airflow prints log lines to stdout before the JSON document.
    dags = {d["dag_id"] for d in json.loads(ok.stdout.strip().splitlines()[-1])}
    assert {"clickstream_exactly_once", "clickstream_page_report"} <= dags

    env = {k: v for k, v in airflow_home.items() if k != "ONCEFLOW_WAREHOUSE"}
    errors = subprocess.run(
        [airflow, "dags", "list-import-errors", "--local", "--output", "json"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert "ONCEFLOW_WAREHOUSE" in errors.stdout + errors.stderr


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_committed_records_survive_a_broker_restart(kafka_broker, restart_broker, kill):
    """noida-db keeps its data directory; Tansu keeps its log in S3 (moto)."""
    from confluent_kafka import Consumer, TopicPartition

    if kill:
        require(kafka_broker, SURVIVES_SIGKILL)
    trip = kafka_round_trip(kafka_broker, records=6, partitions=1)
    broker = restart_broker(kill=kill)
    assert broker.bootstrap == kafka_broker.bootstrap
    consumer = Consumer(broker.config(**{"group.id": "restart-check", "isolation.level": "read_committed"}))
    consumer.assign([TopicPartition(trip.topic, 0, 0)])
    seen = []
    for _ in range(100):
        msg = consumer.poll(0.3)
        if msg is not None and not msg.error():
            seen.append(msg.value())
        if len(set(seen) & set(trip.committed_values)) == len(trip.committed_values):
            break
    consumer.close()
    assert set(trip.committed_values) <= set(seen)
