"""Backfills of an interval pipeline as a user types them (``airflow backfill create``), in a
running Airflow with its scheduler, beside a faulted manual run and the scheduled run. The
spark tasks are Spark Connect clients of one server (up to three at once).

Input: click events stamped (Kafka record timestamps) over the seven hours
before the current one. Then:

1. the DAG is unpaused: the scheduler starts the run of the last complete hour;
2. a manual run of hour 6 is faulted (its Spark job killed after voting): it
   fails, its rollback aborts the batch;
3. a backfill of hours 1 to 6, three runs at a time: every run succeeds, hour
   6's replays the aborted batch's exact ranges;
4. the same backfill again, reprocessing completed runs: every interval is
   committed, so every run is a no-op whose plan task says so;
5. hours 1 and 2 again, reprocessing completed runs with the run param
   ``replace_committed``: each is processed again and its batch replaces the
   committed one (files: the old batch is removed in the same commit; the
   Kafka outputs, declared ``republish``, get the records a second time).

Audited on the real outputs: each input record of the seven hours is in
exactly one committed interval and once per output (twice in the Kafka
outputs for the two replaced hours, as declared), and the intervals tile
each partition (I8).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from onceflow.core import faults
from onceflow.sinks.files.layout import seq_of_batch_dir
from onceflow.core.planning.run_inputs import REPLACE_COMMITTED
from onceflow.core.batch_id import BatchId
from onceflow.core.planning.intervals import Interval
from onceflow.core.states import BatchState
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow_devkit.audit.clickstream_audit import audit_clickstream
from onceflow_devkit.services.iceberg_catalog import table_of
from onceflow_examples.clickstream import CLICKSTREAM_HOURLY
from onceflow_examples.clickstream_data import generate, produce
from tests.system.e2e.conftest import broker_with_topics, hour_with_room, make_world

DAG_ID = "clickstream_hourly"
H = 3_600_000
PER_HOUR = 60


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


def wait_until_finished(api, runs_of, count: int, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(runs := runs_of()) < count or any(r["state"] not in ("success", "failed") for r in runs):
        assert time.monotonic() < deadline, f"runs did not finish in {timeout:.0f} s: {[(r['dag_run_id'], r['state']) for r in runs]}"
        time.sleep(3)
    return runs


def max_overlap(runs: list[dict]) -> int:
    """The most runs that were running at one instant."""
    edges = sorted([(r["start_date"], 1) for r in runs] + [(r["end_date"], -1) for r in runs], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def test_a_backfill_reads_each_hour_once_three_at_a_time_beside_a_faulted_run_and_the_scheduled_one(tmp_path, spark_connect_server, postgres_server,
                                                                                                    e2e_rest_catalog):
    now_hour = hour_with_room(300)  # about the test's length, with room to spare
    t0 = now_hour - 7 * H
    with broker_with_topics() as broker:
        # Spark Connect mode: three batches at once share the server's session (spark-submit mode: the wheel test).
        world = make_world(broker, tmp_path, postgres_server, {faults.RUN_PARAM_GUARD: faults.RUN_PARAM_GUARD_VALUE}, spark_connect_server,
                           catalog=e2e_rest_catalog)
        runtime = PipelineRuntime(CLICKSTREAM_HOURLY, Deployment(world.warehouse, broker, catalogs=world.catalogs))
        events = generate(7 * PER_HOUR, seed=21, malformed_ratio=0.1)
        produce(broker.config(), "clicks", events, timestamps=[t0 + i * (H // PER_HOUR) for i in range(len(events))])
        # Stamped now: every partition has a record after the last hour, which closes it.
        produce(broker.config(), "clicks", generate(2, seed=22), timestamps=[now_hour + 1, now_hour + 1])

        with world.airflow, world.airflow.api() as api:
            api.wait_for_dag(DAG_ID, timeout=180)
            api.unpause(DAG_ID)  # the scheduler starts the run of the last complete hour

            # A manual run after hour 6 reads hour 6 (the last complete one before it); its Spark job dies after voting.
            faulted = api.trigger(DAG_ID, conf={faults.RUN_PARAM: "job.after_votes=crash"}, logical_date=iso(t0 + 6 * H + H // 2))
            assert api.wait_for_run(DAG_ID, faulted, timeout=600) == "failed", api.explain(DAG_ID, faulted)
            assert api.task_states(DAG_ID, faulted)["rollback"] == "success"
            aborted = runtime.batch_of_run(faulted)
            assert aborted.state is BatchState.ABORTED and aborted.plan.interval == Interval(t0 + 5 * H, t0 + 6 * H)

            first = world.airflow.create_backfill(DAG_ID, iso(t0), iso(t0 + 5 * H), max_active_runs=3, reprocess_behavior="none")
            backfill = wait_until_finished(api, lambda: api.runs(DAG_ID, run_type="backfill"), 6, timeout=1200)
            scheduled = wait_until_finished(api, lambda: api.runs(DAG_ID, run_type="scheduled"), 1, timeout=600)
            for run in [*backfill, *scheduled]:
                assert run["state"] == "success", api.explain(DAG_ID, run["dag_run_id"])
            assert 2 <= max_overlap(backfill) <= 3, backfill  # side by side, within the backfill's limit

            api.wait_for_backfill(first["id"], timeout=120)  # a DAG has one backfill at a time
            # Committed hours asked again (two of them: the rule is per run) are no-ops.
            again = world.airflow.create_backfill(DAG_ID, iso(t0), iso(t0 + H), max_active_runs=2, reprocess_behavior="completed")
            api.wait_for_backfill(again["id"], timeout=600)
            asked_again = [r for r in api.runs(DAG_ID, run_type="backfill")
                           if datetime.fromisoformat(r["logical_date"]).timestamp() * 1000 <= t0 + H]
            assert len(asked_again) == 2
            for run in asked_again:
                states = api.task_states(DAG_ID, run["dag_run_id"])
                assert states == dict.fromkeys(("plan", "spark", "commit", "rollback"), "skipped"), api.explain(DAG_ID, run["dag_run_id"])
                # The backfill cleared the committed run: its plan task's second try said so.
                plan = next(t for t in api.task_instances(DAG_ID, run["dag_run_id"]) if t["task_id"] == "plan")
                assert plan["try_number"] == 2, plan
                log = api.task_log(DAG_ID, run["dag_run_id"], "plan", try_number=2)
                assert "is already committed: nothing to do" in log, log

            api.wait_for_backfill(again["id"], timeout=120)
            replace = world.airflow.create_backfill(DAG_ID, iso(t0), iso(t0 + H), max_active_runs=2,
                                                    reprocess_behavior="completed", dag_run_conf={REPLACE_COMMITTED: True})
            api.wait_for_backfill(replace["id"], timeout=600)
            replaced_runs = [r for r in api.runs(DAG_ID, run_type="backfill")
                             if datetime.fromisoformat(r["logical_date"]).timestamp() * 1000 <= t0 + H]
            assert len(replaced_runs) == 2
            for run in replaced_runs:
                assert run["state"] == "success", api.explain(DAG_ID, run["dag_run_id"])
                assert api.task_states(DAG_ID, run["dag_run_id"])["commit"] == "success"

        batches = {s.plan.interval: s for r in [*backfill, *scheduled] if (s := runtime.batch_of_run(r["dag_run_id"]))}
        assert sorted(batches) == [Interval(t0 + i * H, t0 + (i + 1) * H) for i in range(7)]
        assert all(s.state is BatchState.COMMITTED for s in batches.values())
        hour_6 = batches[Interval(t0 + 5 * H, t0 + 6 * H)].plan
        assert hour_6.replay_of == aborted.batch_seq and hour_6.ranges == aborted.plan.ranges
        for hour in range(2):
            replacement = batches[Interval(t0 + hour * H, t0 + (hour + 1) * H)].plan
            old = runtime.reader.describe(replacement.replaces.batch_seq)
            assert old.state is BatchState.COMMITTED and old.plan.ranges == replacement.ranges
            assert replacement.replaces.outputs == {
                "page_minute_counts": "replaced", "page_minute_table": "replaced", "clicks_enriched": "republished",
                "clicks_dead_letter": "republished"}
        batch_dirs = [s for name in runtime.storage.list_dir(runtime.sink_uri("page_minute_counts"))
                      if (s := seq_of_batch_dir(name)) is not None]
        assert sorted(batch_dirs) == sorted(s.batch_seq for s in batches.values())  # the replaced two are gone
        # The table swapped each replaced hour's rows in one overwrite snapshot naming the batch it replaces.
        table = table_of(runtime, "page_minute_table")
        swaps = {s.summary["onceflow.replaces"] for s in table.metadata.snapshots if s.summary["onceflow.replaces"]}
        assert swaps == {str(BatchId(batches[Interval(t0 + h * H, t0 + (h + 1) * H)].plan.replaces.batch_seq)) for h in range(2)}

        report = audit_clickstream(runtime)
        assert report.ok, report.summary()
        assert report.committed_batches == 7 and report.input_records == 7 * PER_HOUR, report.summary()
        assert report.outputs["clicks_enriched"].republished + report.outputs["clicks_dead_letter"].republished == 2 * PER_HOUR
        assert not report.contiguity_errors
