"""A backfill of a sequence pipeline, through Airflow's own backfill API (what
`airflow backfill create` and the UI's dialog call), in a running Airflow:
each run's plan task refuses at once, saying why, and nothing is read.

A sequence pipeline's batch is "the next offsets after the last committed
batch", whatever the run's logical date: a backfill run would not process its
interval, and backfill runs bypass the DAG's max_active_runs. In the slow set, as make test's backfills through the scheduler are the interval
pipeline's (test_interval_backfill.py); the refusal itself is unit-tested
(tests/unit/airflow/operators).
"""

from __future__ import annotations

import time

import pytest

from tests.system.e2e.conftest import broker_with_topics, make_world

DAG_ID = "clickstream_exactly_once"


@pytest.mark.slow
def test_a_backfill_of_a_sequence_pipeline_is_refused_and_reads_nothing(tmp_path, postgres_server, e2e_rest_catalog):
    with broker_with_topics() as broker:
        world = make_world(broker, tmp_path, postgres_server, {"ONCEFLOW_SCHEDULE": "@hourly"},
                           catalog=e2e_rest_catalog)
        world.produce(100, seed=5)
        with world.airflow, world.airflow.api() as api:
            api.wait_for_dag(DAG_ID, timeout=180)
            api.create_backfill(DAG_ID, "2026-11-01T00:00:00Z", "2026-11-01T02:00:00Z",
                                max_active_runs=2, reprocess_behavior="none")
            api.unpause(DAG_ID)  # backfill runs of a paused DAG stay queued (a scheduled run may start too)
            deadline = time.monotonic() + 300
            while len(runs := api.runs(DAG_ID, run_type="backfill")) < 3 or any(
                r["state"] not in ("success", "failed") for r in runs
            ):
                assert time.monotonic() < deadline, f"backfill runs did not finish: {runs}"
                time.sleep(2)
            for run in runs:
                run_id = run["dag_run_id"]
                assert run["state"] == "failed", api.explain(DAG_ID, run_id)
                states = api.task_states(DAG_ID, run_id)
                assert states["plan"] == "failed" and states["spark"] == "upstream_failed", states
                plan = next(t for t in api.task_instances(DAG_ID, run_id) if t["task_id"] == "plan")
                assert plan["try_number"] == 1  # refused for good, not retried
                log = api.task_log(DAG_ID, run_id, "plan")
                assert "plans its batches as a sequence of offsets, not by data interval" in log, log
                assert "nothing was read" in log and "Trigger ordinary runs" in log
            # No backfill run planned a batch (the DAG's own scheduled run, if one started, may have).
            assert all(world.runtime.batch_of_run(r["dag_run_id"]) is None for r in runs)
