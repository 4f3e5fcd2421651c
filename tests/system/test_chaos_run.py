"""Chaos runs through a real Airflow, Spark and broker, judged by the audit of
the real outputs (every input record exactly once in every output).

The bounded Spark Connect run (two faulted batches) is in the default suite;
the bounded spark-submit run, the runs on Tansu, on the S3
warehouse behind the fault proxy and with a PostgreSQL table are slow. The long run is
`make chaos` (docs/chaos.md has its figures)."""

from __future__ import annotations

import uuid

import pyiceberg
import pytest

from onceflow_devkit.chaos import schedule
from onceflow_devkit.chaos.runner import ChaosOptions, run_chaos
from tests.conftest import TEST_HOME


def chaos_home():
    """Not under pytest's tmp_path, closed to other users: the stack's PostgreSQL runs as user postgres."""
    return TEST_HOME / f"chaos-{uuid.uuid4().hex[:6]}"


def _assert_exactly_once(figures, min_faulted: int) -> None:
    report = f"{figures.summary()}\n{figures.audit_summary}"
    assert figures.ok, report
    assert figures.faulted_batches >= min_faulted, report
    assert figures.records_in > 0 and figures.records_committed_in == figures.records_in, report
    assert figures.duplicates == 0 and figures.missing == 0 and figures.unexpected == 0, report
    assert all(count > 0 for count in figures.records_out.values()), report
    assert figures.ledger.unfinished == 0 and figures.ledger.committed >= 1, report


@pytest.mark.chaos
@pytest.mark.slow  # 3 min; make test's bounded run is the Spark Connect one below
@pytest.mark.timeout(1800)  # ~5 min on 2 idle cores; a loaded machine triples it
def test_a_bounded_chaos_run_on_apache_kafka_and_files_loses_and_duplicates_nothing():
    kinds = (schedule.POINT_CRASH, schedule.KILL_SPARK_SUBMIT, schedule.BROKER_RESTART, schedule.BROKER_FENCE)
    figures = run_chaos(ChaosOptions(4, seed=8, broker="apache", warehouse="file", kinds=kinds,
                                     records_per_partition=50, home=chaos_home()))
    _assert_exactly_once(figures, min_faulted=3)
    assert [r.split()[0] for r in figures.table_readers] == ["pyiceberg", "Spark"], figures.summary()


@pytest.mark.chaos
@pytest.mark.slow  # 4 min; make test's Celery test is tests/system/e2e/test_celery_executor.py
@pytest.mark.timeout(1800)
def test_a_bounded_chaos_run_on_the_celery_executor_loses_and_duplicates_nothing():
    # Task processes are the Celery workers' children here: a lost worker (every task process of the run
    # and all it started), a killed Spark Connect client, a crashed fault point, two runs of the DAG at once.
    kinds = (schedule.LOSE_WORKER, schedule.KILL_CONNECT_CLIENT, schedule.POINT_CRASH, schedule.TWO_RUNS_AT_ONCE)
    figures = run_chaos(ChaosOptions(4, seed=8, broker="apache", warehouse="file", kinds=kinds, spark="connect",
                                     executor="celery", records_per_partition=50, home=chaos_home()))
    _assert_exactly_once(figures, min_faulted=3)


@pytest.mark.chaos
@pytest.mark.timeout(1800)  # ~2 min on 2 idle cores
def test_a_bounded_chaos_run_in_spark_connect_mode_loses_and_duplicates_nothing():
    # The spark tasks are clients of one Spark Connect server: a server killed with its Python workers
    # and started again, and a killed worker. Two kinds keep make test under 25 minutes: a killed client
    # (the spark task's process) is make test's Celery test's killed worker; the abort path of a crashed
    # fault point is the interval backfill test's faulted hour.
    # Spark's read of the table in the audit (20-40 s) is left to the slow runs here and to
    # tests/integration/sinks/iceberg/test_spark_audits_committed_table.py.
    kinds = (schedule.RESTART_CONNECT_SERVER, schedule.KILL_PYTHON_WORKER)
    figures = run_chaos(ChaosOptions(2, seed=8, broker="apache", warehouse="file", kinds=kinds, spark="connect",
                                     records_per_partition=50, home=chaos_home(), spark_reads_table=False))
    _assert_exactly_once(figures, min_faulted=1)
    assert figures.table_readers == [f"pyiceberg {pyiceberg.__version__}"], figures.summary()
    assert schedule.RESTART_CONNECT_SERVER in figures.injected_by_kind, figures.summary()


@pytest.mark.chaos
@pytest.mark.slow  # 4 min
@pytest.mark.timeout(1800)
def test_a_bounded_chaos_run_with_a_postgresql_table_loses_and_duplicates_nothing():
    # The table's server crashes as the commit runs; its connections are cut from the batch's first
    # PREPARE or from the commit task's start. The audit reads the table with plain SQL, and the run
    # fails if a prepared transaction of the pipeline is left on the server.
    figures = run_chaos(ChaosOptions(6, seed=11, broker="apache", warehouse="file", kinds=schedule.POSTGRES_KINDS,
                                     spark="connect", postgres=True, records_per_partition=50, home=chaos_home()))
    _assert_exactly_once(figures, min_faulted=2)
    assert set(figures.injected_by_kind) == set(schedule.POSTGRES_KINDS), figures.summary()
    assert figures.records_out["clicks_table"] == figures.records_out["clicks_enriched"], figures.summary()


@pytest.mark.chaos
@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("broker,warehouse", [("apache", "s3"), ("noida", "file"), ("noida", "s3"), ("tansu", "file"),
                                              ("tansu", "s3")])
def test_chaos_on_every_broker_and_warehouse_loses_and_duplicates_nothing(broker, warehouse):
    kinds = schedule.kinds_for(warehouse == "s3")
    figures = run_chaos(ChaosOptions(len(kinds), seed=7, broker=broker, warehouse=warehouse, kinds=kinds,
                                     records_per_partition=50, home=chaos_home()))
    _assert_exactly_once(figures, min_faulted=len(kinds) - 3)


@pytest.mark.chaos
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_chaos_in_backfill_mode_loses_and_duplicates_nothing_and_the_hours_tile_the_log():
    kinds = (schedule.POINT_CRASH, schedule.KILL_SPARK_SUBMIT, schedule.BROKER_RESTART, schedule.BROKER_FENCE)
    figures = run_chaos(ChaosOptions(4, seed=8, broker="noida", warehouse="file", kinds=kinds, mode="backfill",
                                     records_per_partition=50, home=chaos_home()))
    _assert_exactly_once(figures, min_faulted=3)
    assert figures.drain_runs >= 1  # at least one backfill of every hour ran (committed hours as no-ops)
