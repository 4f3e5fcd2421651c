"""The clickstream DAG run by Airflow itself (``airflow dags test``), with
injected failures, audited on the real outputs.

``dags test`` runs every task inside its own process: a ``crash`` fault
(``os._exit``) there ends the whole run where it happened, which is what a
worker killed by the OOM killer or a lost node leaves behind.
"""

from __future__ import annotations

import pytest

from onceflow.core import faults
from onceflow_examples.clickstream import CLICKSTREAM
from onceflow.core.states import BatchState

DAG_ID = "clickstream_exactly_once"
CONF = {"max_records_per_partition": 10_000}
SINKS = {s.name for s in CLICKSTREAM.sinks}
COMMITTED_RUN = {"plan": "success", "spark": "success", "commit": "success", "rollback": "skipped"}


def without_plan(states: dict[str, str]) -> dict[str, str]:
    return {task: state for task, state in states.items() if task != "plan"}


@pytest.mark.slow
@pytest.mark.parametrize("plan_in_spark_task", [False, True], ids=["plan task", "planned by the spark task"])
def test_a_spark_failure_after_pre_commit_is_rolled_back_and_the_next_run_replays_the_same_ranges(world, plan_in_spark_task):
    # Without a plan task, the rollback finds the batch the failed spark task planned (its XCom).
    shape = {} if plan_in_spark_task else {"plan": "success"}  # the plan task's state, when there is one
    world.airflow.extra_env = {**world.airflow.extra_env, "CLICKSTREAM_PLAN_IN_SPARK_TASK": str(int(plan_in_spark_task))}
    produced = world.produce(600, seed=1)

    with world.faults("job.after_votes=raise"):
        failed = world.airflow.dags_test(DAG_ID, conf=CONF, timeout=900)
    assert failed.run_state == "failed", failed.describe()
    assert failed.tasks == {**shape, "spark": "failed", "commit": "upstream_failed", "rollback": "success"}, failed.describe()
    aborted = world.runtime.coordinator.describe(1)
    assert aborted.state is BatchState.ABORTED, aborted
    # The job failed after pre-commit, not before: every output had voted.
    assert set(aborted.votes) == SINKS and not aborted.missing_votes, aborted
    report = world.audit()
    assert report.ok and report.committed_batches == 0, report.summary()
    assert world.visible("clicks_enriched") == 0 and world.visible("clicks_dead_letter") == 0

    replay = world.airflow.dags_test(DAG_ID, conf=CONF, timeout=900)
    assert replay.succeeded and replay.tasks == {**shape, **without_plan(COMMITTED_RUN)}, replay.describe()
    batch = world.runtime.coordinator.describe(2)
    assert batch.state is BatchState.COMMITTED, batch
    assert batch.plan.replay_of == 1 and batch.plan.ranges == aborted.plan.ranges, batch.plan
    report = world.audit(spark_reads_tables=True)  # Spark reads the table too, through the REST catalog
    assert report.ok and report.duplicates == 0, report.summary()
    assert report.committed_batches == 1 and report.input_records == produced, report.summary()
    assert [reader.split()[0] for reader in report.table_readers] == ["pyiceberg", "Spark"], report.summary()
    assert world.visible("clicks_enriched") == report.valid
    assert world.visible("clicks_dead_letter") == report.malformed


@pytest.mark.slow
def test_a_commit_crashed_between_effects_is_redone_by_the_next_runs_plan_task(world):
    produced = world.produce(400, seed=2)

    with world.faults("commit.between_effects=crash"):
        crashed = world.airflow.dags_test(DAG_ID, conf=CONF, timeout=900)
    assert crashed.returncode == faults.CRASH_EXIT_CODE and not crashed.succeeded, crashed.describe()
    assert crashed.tasks["spark"] == "success" and crashed.tasks["commit"] not in ("success", "skipped"), crashed.describe()
    half = world.runtime.coordinator.describe(1)
    # COMMIT decided, exactly one effect applied (sinks commit in name order), batch not done.
    assert half.state is BatchState.COMMITTING, half
    assert sorted(half.done) == [min(SINKS)], half.done
    assert world.visible("clicks_enriched") == 0  # not yet: its effect comes after the crash

    produced += world.produce(200, seed=3)
    next_run = world.airflow.dags_test(DAG_ID, conf=CONF, timeout=900)
    assert next_run.succeeded and next_run.tasks == COMMITTED_RUN, next_run.describe()
    assert world.runtime.coordinator.describe(1).state is BatchState.COMMITTED  # redone by plan (I3)
    following = world.runtime.coordinator.describe(2)
    assert following.state is BatchState.COMMITTED and following.plan.records == 200, following
    report = world.audit()
    assert report.ok and report.duplicates == 0 and report.missing == 0, report.summary()
    assert report.committed_batches == 2 and report.input_records == produced, report.summary()
    assert world.visible("clicks_enriched") == report.valid
    assert world.visible("clicks_dead_letter") == report.malformed
