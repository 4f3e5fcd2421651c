"""Batches when data arrives: the clickstream pipeline scheduled on its input,
in a running Airflow with its scheduler and triggerer; nobody triggers a run.

1. 600 records arrive (the threshold is 500): a run starts and commits them;
2. 100 more arrive, under the threshold: the age rule starts the run, early
   by what the first run took to commit (its trigger's event says so), so
   before the oldest is 8 s old;
3. nothing more arrives: no other run starts, however often the trigger looks.

The DAG is the shape a latency-minded deployment chooses: no plan task, its spark task plans each
batch before its job (``plan_in_spark_task=True``), and the commit task finds the batch it planned.

Audited on the real outputs. Freshness (produce to read_committed visibility
of the enriched records) is printed; benchmarks/ has the measured figures.
"""

from __future__ import annotations

import time
from datetime import datetime

from onceflow_devkit.airflow_env import onceflow_airflow
from tests.system.e2e.conftest import ClickstreamWorld, broker_with_topics, emptied

DAG_ID = "clickstream_on_input"
# The DAG file takes its schedule from the environment, spelt as pipeline_dag's
# schedule=when_input(records=500, max_age_s=8, poll_s=1) would be.
SCHEDULE = "input: records=500, max_age_s=8, poll_s=1"
DAG_FILE = f'''# An Airflow DAG: the example pipeline, run when its input has waited long enough (ONCEFLOW_SCHEDULE)
from onceflow.airflow.dag_factory import pipeline_dag
from onceflow_examples.clickstream import CLICKSTREAM

dag = pipeline_dag(CLICKSTREAM, dag_id="{DAG_ID}", plan_in_spark_task=True)
'''


def runs_started(api) -> list[dict]:
    return sorted(api.runs(DAG_ID), key=lambda r: r["run_after"])


def wait_for_runs(api, count: int, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(runs := runs_started(api)) < count or any(r["state"] not in ("success", "failed") for r in runs):
        assert time.monotonic() < deadline, f"{count} run(s) not done in {timeout:.0f} s: {[(r['dag_run_id'], r['state']) for r in runs]}"
        time.sleep(0.5)
    return runs


def started_at(run: dict) -> float:
    return datetime.fromisoformat(run["start_date"]).timestamp()


def test_runs_start_when_enough_records_wait_or_the_oldest_is_old_enough_and_only_then(tmp_path, spark_connect_server, postgres_server,
                                                                                        e2e_rest_catalog):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "on_input.py").write_text(DAG_FILE)
    with broker_with_topics() as broker:
        warehouse = f"file://{tmp_path}/warehouse"
        airflow = onceflow_airflow(tmp_path / "airflow", broker, warehouse, dags_folder=dags, plugins_folder=None,
                                   spark_connect=spark_connect_server, triggerer=True, postgres=postgres_server,
                                   extra_env={"ONCEFLOW_SCHEDULE": SCHEDULE}, iceberg_rest=emptied(e2e_rest_catalog))
        world = ClickstreamWorld(broker, warehouse, airflow, catalog=e2e_rest_catalog)
        with airflow, airflow.api() as api:
            api.wait_for_dag(DAG_ID, timeout=180)
            api.unpause(DAG_ID)
            time.sleep(3)  # the triggerer picks the watcher up; with no input, nothing starts
            assert runs_started(api) == []

            produced = time.time()
            world.produce(600, seed=31)
            first = wait_for_runs(api, 1, timeout=180)[0]
            assert first["state"] == "success", api.explain(DAG_ID, first["dag_run_id"])
            assert first["run_type"] == "asset_triggered"
            assert api.task_states(DAG_ID, first["dag_run_id"]) == {"spark": "success", "commit": "success",
                                                                    "rollback": "skipped"}
            visible = world.visible("clicks_enriched")
            print(f"600 records: run started {started_at(first) - produced:.1f} s after the produce, "
                  f"committed and visible {time.time() - produced:.1f} s after it ({visible} enriched records)")

            produced = time.time()
            world.produce(100, seed=32)
            second = wait_for_runs(api, 2, timeout=180)[1]
            assert second["state"] == "success", api.explain(DAG_ID, second["dag_run_id"])
            waited = started_at(second) - produced
            # 100 records are under the threshold: the age rule starts the run, early by the first run's time
            # from its trigger's event to its commit, so that they are committed by the time they are 8 s old.
            (event,) = api.triggering_events(DAG_ID, second["dag_run_id"])
            fired = event["extra"]["payload"]
            assert fired["waiting"] == 100 and "the last run took to commit" in fired["reason"], fired
            assert fired["oldest_age_s"] + fired["lead_s"] >= 8 - 0.01 and fired["oldest_age_s"] < 8, fired
            assert waited < 8, waited
            print(f"100 records: run started {waited:.1f} s after the produce, committed and visible "
                  f"{time.time() - produced:.1f} s after it")

            time.sleep(6)  # six more looks at an input with nothing waiting
            assert len(runs_started(api)) == 2


        batches = [world.runtime.batch_of_run(r["dag_run_id"]) for r in (first, second)]
        assert [b.plan.records for b in batches] == [600, 100]
        assert all(b.state.value == "committed" for b in batches)
        report = world.audit()
        assert report.ok, report.summary()
        assert report.input_records == 700
