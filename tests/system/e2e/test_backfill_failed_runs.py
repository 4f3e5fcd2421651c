"""``airflow backfill create --reprocess-behavior failed`` on an interval pipeline, as a user types it.

A first backfill of two hours runs with a fault in its run conf (each Spark job killed after
voting): both runs fail and their rollbacks abort the batches. A second backfill of the same hours,
reprocessing failed runs with an empty run conf, clears both runs and runs them again: each replays
its aborted batch's exact ranges and commits. Audited on the real outputs: each record of the two
hours once. (Reprocessing none and completed: test_interval_backfill.py.) Slow.
"""

from __future__ import annotations


import pytest

from onceflow.core import faults
from onceflow.core.planning.intervals import Interval
from onceflow.core.states import BatchState
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow_devkit.audit.clickstream_audit import audit_clickstream
from onceflow_examples.clickstream import CLICKSTREAM_HOURLY
from onceflow_examples.clickstream_data import generate, produce
from tests.system.e2e.conftest import broker_with_topics, hour_with_room, make_world
from tests.system.e2e.test_interval_backfill import DAG_ID, H, iso, wait_until_finished

PER_HOUR = 40


@pytest.mark.slow
def test_a_backfill_that_reprocesses_failed_runs_replays_their_aborted_batches_once(tmp_path, spark_connect_server,
                                                                                     postgres_server, e2e_rest_catalog):
    now_hour = hour_with_room(240)  # about the test's length, with room to spare
    t0 = now_hour - 3 * H
    with broker_with_topics() as broker:
        world = make_world(broker, tmp_path, postgres_server, {faults.RUN_PARAM_GUARD: faults.RUN_PARAM_GUARD_VALUE},
                           spark_connect_server, catalog=e2e_rest_catalog)
        runtime = PipelineRuntime(CLICKSTREAM_HOURLY, Deployment(world.warehouse, broker, catalogs=world.catalogs))
        events = generate(2 * PER_HOUR, seed=31, malformed_ratio=0.1)
        produce(broker.config(), "clicks", events, timestamps=[t0 + i * (H // PER_HOUR) for i in range(len(events))])
        produce(broker.config(), "clicks", generate(2, seed=32), timestamps=[now_hour + 1, now_hour + 1])  # closes the hours

        with world.airflow, world.airflow.api() as api:
            api.wait_for_dag(DAG_ID, timeout=180)
            failing = world.airflow.create_backfill(DAG_ID, iso(t0), iso(t0 + H), max_active_runs=2, reprocess_behavior="none",
                                                    dag_run_conf={faults.RUN_PARAM: "job.after_votes=crash"})
            api.unpause(DAG_ID)
            failed = wait_until_finished(api, lambda: api.runs(DAG_ID, run_type="backfill"), 2, timeout=600)
            assert [r["state"] for r in failed] == ["failed", "failed"], [api.explain(DAG_ID, r["dag_run_id"]) for r in failed]
            aborted = {}
            for run in failed:
                assert api.task_states(DAG_ID, run["dag_run_id"])["rollback"] == "success"
                batch = runtime.batch_of_run(run["dag_run_id"])
                assert batch.state is BatchState.ABORTED, batch
                aborted[batch.plan.interval] = batch
            assert sorted(aborted) == [Interval(t0, t0 + H), Interval(t0 + H, t0 + 2 * H)]
            api.wait_for_backfill(failing["id"], timeout=120)

            again = world.airflow.create_backfill(DAG_ID, iso(t0), iso(t0 + H), max_active_runs=2, reprocess_behavior="failed",
                                                  dag_run_conf={})
            api.wait_for_backfill(again["id"], timeout=600)
            rerun = wait_until_finished(api, lambda: api.runs(DAG_ID, run_type="backfill"), 2, timeout=600)
            assert sorted(r["dag_run_id"] for r in rerun) == sorted(r["dag_run_id"] for r in failed)  # the same runs, cleared
            for run in rerun:
                assert run["state"] == "success", api.explain(DAG_ID, run["dag_run_id"])
            # Unpaused, the scheduler also ran the last complete hour, which holds no record.
            scheduled = wait_until_finished(api, lambda: api.runs(DAG_ID, run_type="scheduled"), 1, timeout=300)
            assert [r["state"] for r in scheduled] == ["success"], api.explain(DAG_ID, scheduled[0]["dag_run_id"])

        for run in rerun:
            batch = runtime.batch_of_run(run["dag_run_id"])
            assert batch.state is BatchState.COMMITTED, batch
            replayed = aborted[batch.plan.interval]
            assert batch.plan.replay_of == replayed.batch_seq and batch.plan.ranges == replayed.plan.ranges
        report = audit_clickstream(runtime)
        assert report.ok, report.summary()
        assert report.committed_batches == 3 and report.input_records == 2 * PER_HOUR, report.summary()
        assert not report.contiguity_errors
