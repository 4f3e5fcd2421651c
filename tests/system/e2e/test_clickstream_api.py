"""The clickstream DAG in a running Airflow (api-server + scheduler +
dag-processor), driven over the REST API as an operator would: a triggered
run with conf, the downstream DAG fed by its Asset event, and a cleared
committed run that must change nothing; a secret in the transform's params
shows nowhere on the way. One server session for all of it
(starting Airflow costs ~30 s). Not marked slow: it is the suite's one
end-to-end proof that a run commits exactly once (~6 min on 2 loaded cores).
The fault scenarios (test_clickstream_dag.py) are slow: two runs each."""

from __future__ import annotations

import json
import time
import uuid

from onceflow_devkit.local_airflow.metadata import MetadataDb
from onceflow.core.states import BatchState
from tests.support import SecretWatch
from tests.system.e2e.conftest import refused_runs

DAG_ID = "clickstream_exactly_once"
REPORT_DAG_ID = "clickstream_page_report"
PER_PARTITION = 150


def _wait_for_new_try(api, run_id: str, task_id: str, after_try: int, timeout: float = 300.0) -> dict:
    """The task instance once a try newer than ``after_try`` has finished."""
    deadline = time.monotonic() + timeout
    while True:
        ti = next(t for t in api.task_instances(DAG_ID, run_id) if t["task_id"] == task_id)
        if ti["try_number"] > after_try and ti["state"] in ("success", "failed", "skipped", "upstream_failed"):
            return ti
        assert time.monotonic() < deadline, f"{task_id} of {run_id} did not run again: {ti}"
        time.sleep(1)


def _wait_for_first_run(world, dag_id: str, timeout: float = 180.0) -> str:
    db = MetadataDb(world.airflow.sql_alchemy_conn)
    deadline = time.monotonic() + timeout
    while (run_id := db.newest_run_after(dag_id, 0)) is None:
        assert time.monotonic() < deadline, f"no run of {dag_id} within {timeout:.0f} s"
        time.sleep(1)
    return run_id


def test_a_triggered_run_commits_feeds_the_downstream_dag_and_clearing_it_changes_nothing(world):
    world.produce(4 * PER_PARTITION, seed=4)  # 2 partitions: half of each is left for a later batch
    # The spec's free-form params may hold a token: the spark task once passed them as an argument.
    secret = f"s3cr3t-{uuid.uuid4()}"
    world.airflow.extra_env = {**world.airflow.extra_env, "CLICKSTREAM_PARAMS": json.dumps({"token": secret})}
    with world.airflow, world.airflow.api() as api:
        api.wait_for_dag(DAG_ID, timeout=180)
        api.wait_for_dag(REPORT_DAG_ID, timeout=180)
        api.unpause(REPORT_DAG_ID)
        api.unpause(DAG_ID)

        # 4: a run triggered with conf
        with SecretWatch(secret) as watch:
            run_id = api.trigger(DAG_ID, conf={"max_records_per_partition": PER_PARTITION})
            assert api.wait_for_run(DAG_ID, run_id, timeout=600) == "success", api.explain(DAG_ID, run_id)
        assert api.task_states(DAG_ID, run_id) == {
            "plan": "success", "spark": "success", "commit": "success", "rollback": "skipped"
        }
        assert not (exposed := watch.exposures(api, DAG_ID, run_id)), "\n".join(exposed)
        batch = world.runtime.batch_of_run(run_id)
        assert batch is not None and batch.batch_seq == 1 and batch.state is BatchState.COMMITTED, batch
        assert [r.size for r in batch.plan.ranges] == [PER_PARTITION, PER_PARTITION], batch.plan.ranges
        report = world.audit()
        assert report.ok and report.committed_batches == 1 and report.input_records == 2 * PER_PARTITION, report.summary()

        # 5: the commit's Asset event runs the downstream DAG on committed data
        report_run = _wait_for_first_run(world, REPORT_DAG_ID)
        assert api.wait_for_run(REPORT_DAG_ID, report_run, timeout=300) == "success", api.explain(REPORT_DAG_ID, report_run)
        # the event says which batch was committed: the downstream task read it from its triggering events
        report_log = api.task_log(REPORT_DAG_ID, report_run, "top_pages")
        assert "triggered by committed batch(es) ['0000000001']" in report_log, report_log

        # 3: clearing the committed run is a no-op that says so
        plan_try = next(t for t in api.task_instances(DAG_ID, run_id) if t["task_id"] == "plan")["try_number"]
        api.clear_run(DAG_ID, run_id)
        plan = _wait_for_new_try(api, run_id, "plan", plan_try)
        assert api.wait_for_run(DAG_ID, run_id, timeout=300) == "success", api.explain(DAG_ID, run_id)
        assert plan["state"] == "skipped", api.explain(DAG_ID, run_id)
        assert "already committed" in api.task_log(DAG_ID, run_id, "plan", plan["try_number"])
        assert api.task_states(DAG_ID, run_id) == {
            "plan": "skipped", "spark": "skipped", "commit": "skipped", "rollback": "skipped"
        }
        assert world.runtime.coordinator.latest_seq() == 1  # no new batch
        assert world.audit().to_dict() == report.to_dict()

        # A run conf cannot set what onceflow records about a batch: each of these once deleted a committed
        # batch, killed the pipeline or failed in Spark; now the plan task refuses it, naming the key.
        # (Every key and value: test_run_conf_fuzz.py, slow.)
        confs = [{"replaces": 1}, {"interval": "2026-11-25T00:00:00Z/2026-11-25T01:00:00Z"}, {"slot": 3}]
        for conf, log in zip(confs, refused_runs(api, DAG_ID, confs).values()):
            key = next(iter(conf))
            assert f"run parameter(s) {key!r} that the pipeline does not declare" in log, log
            assert "It accepts only: faults, max_records_per_partition" in log, log
        assert world.runtime.coordinator.latest_seq() == 1  # nothing was planned
        run_id = api.trigger(DAG_ID, conf={"max_records_per_partition": PER_PARTITION})
        assert api.wait_for_run(DAG_ID, run_id, timeout=600) == "success", api.explain(DAG_ID, run_id)
        report = world.audit()  # from the raw input and the real outputs: batch 1 intact, batch 2 beside it
        assert report.ok and report.committed_batches == 2 and report.input_records == 4 * PER_PARTITION, report.summary()
