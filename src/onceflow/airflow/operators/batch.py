"""plan, commit and rollback: the protocol tasks of one batch (docs/protocol.md, "One batch").

All three run on an Airflow worker. The DAG run is the unit of work: the plan
task binds the run to a batch (by run id, in the ledger), the Spark task(s)
pre-commit it, then either commit (trigger_rule all_success) or rollback
(trigger_rule one_failed) finishes it::

    plan ──► spark job(s) ──► commit
                  └─────────► rollback

A DAG built with ``plan_in_spark_task=True`` has no plan task: the spark task runs the same
plan (``steps.BatchSteps.plan``) in its own process before its job, and leaves the batch in
XCom for commit and rollback the same way.

Each task is idempotent: clearing or retrying any of them converges on the
batch's one decision (I2). Protocol errors map to task outcomes:

    RetryLater          task fails and is retried by Airflow (retries=...)
    BatchAborted        commit task fails: the batch was aborted, offsets did
                        not move, the next run re-reads the records
    CommitFailed        task fails loudly; the batch stays COMMITTING and any
                        later run's plan task redoes the commit (I3, I7)
    batch already done  a cleared run: the task that plans skips the run (no-op)
    PlanMustWait        interval pipelines: the interval is not closed yet, or
                        every slot is in flight; the task that plans is
                        rescheduled (no worker slot held while it waits)
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import BaseOperator

from onceflow.core.states import BatchState
from onceflow.pipeline.spec import PipelineSpec
from onceflow.airflow.deployed import PLAN_TASK_ID, PLAN_XCOM_KEY, DeployedPipeline
from onceflow.airflow.operators.steps import BatchSteps, task_identity

log = logging.getLogger(__name__)


class _BatchOperator(BaseOperator):
    ui_color = "#e8f4ea"

    def __init__(
        self,
        *,
        pipeline: PipelineSpec,
        warehouse: str,
        kafka_conn_id: str = "onceflow_kafka",
        aws_conn_id: str | None = "onceflow_s3",
        plan_task_id: str = PLAN_TASK_ID,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.warehouse = warehouse
        self.kafka_conn_id = kafka_conn_id
        self.aws_conn_id = aws_conn_id
        self.plan_task_id = plan_task_id

    def steps(self, context) -> BatchSteps:
        deployed = DeployedPipeline(context["ti"].dag_id, self.pipeline, self.warehouse, self.kafka_conn_id,
                                    self.aws_conn_id)
        return BatchSteps(deployed, self.task_id, self.plan_task_id)


class PlanBatchOperator(_BatchOperator):
    """Recover any unfinished batch, then bind this DAG run to its batch (``BatchSteps.plan``).

    Returns (XCom) ``{"batch_seq", "batch_id", "records", "ranges"}``. Run
    params (``onceflow.core.planning.run_inputs``): ``max_records_per_partition``
    overrides the spec for this run; a run with a parameter the DAG does not
    declare is refused before anything is written. A run whose batch is
    already committed is skipped with a log line saying so; a run whose batch
    was aborted re-executes the same immutable ranges.
    """

    def execute(self, context) -> dict[str, Any]:
        planned, _ = self.steps(context).plan(context, self.dag)
        return planned


class CommitBatchOperator(_BatchOperator):
    """Decide COMMIT (when every vote is present and valid) and apply it:
    promote files, commit Kafka transactions, mirror input offsets to the
    consumer group. Emits an Asset event per output on success (outlets)."""

    def execute(self, context) -> dict[str, Any]:
        steps = self.steps(context)
        runtime = steps.runtime(context)
        seq = steps.planned_seq(context)
        status = runtime.coordinator.commit(seq)
        runtime.after_commit(status.plan)
        steps.announce(context, runtime, also=seq)
        votes = {name: vote.records for name, vote in status.votes.items()}
        log.info("batch %s of %s is %s; records per output: %s", status.batch_id, self.pipeline.name, status.state.value, votes)
        return {"batch_seq": seq, "state": status.state.value, "records": votes}


class RollbackBatchOperator(_BatchOperator):
    """Decide ABORT and undo everything the batch could have produced (fence
    every transactional id of the plan, delete staging). If COMMIT was
    decided first, finishes the commit instead. Offsets stay where they were."""

    def execute(self, context) -> dict[str, Any]:
        planned = context["ti"].xcom_pull(task_ids=self.plan_task_id, key=PLAN_XCOM_KEY)
        seq = int(planned["batch_seq"]) if planned else self.batch_without_xcom(context)
        if seq is None:
            # A run its plan task refused (whatever the reason: its conf, its faults param, its run type) has
            # nothing to undo: the rollback neither arms the run's faults nor writes anything.
            log.info("no batch was planned in this run: nothing to roll back")
            return {"state": "nothing planned"}
        steps = self.steps(context)
        runtime = steps.runtime(context)
        # Task instances of the run are not readable from a task in Airflow 3
        # (no metadata DB access): the task log of the run shows which failed.
        reason = f"a task upstream of rollback failed in Airflow run {context['run_id']}"
        status = runtime.coordinator.rollback(seq, reason=reason)
        if status.state is BatchState.COMMITTED:
            runtime.after_commit(status.plan)
            steps.announce(context, runtime, also=seq)
        log.info("batch %s of %s is %s", status.batch_id, self.pipeline.name, status.state.value)
        return {"batch_seq": seq, "state": status.state.value}

    def batch_without_xcom(self, context) -> int | None:
        """The run's undecided batch when the task that plans left none in XCom, or None. Only a DAG without
        a plan task can have one: Airflow clears a task's XCom when a new try starts, so a spark task whose
        first try planned and whose last died before planning again leaves none; the ledger knows the batch
        by its run. The plan task's XCom outlives the spark task's tries."""
        if self.plan_task_id == PLAN_TASK_ID:
            return None
        batch = self.steps(context).deployed.runtime(identity=task_identity(context)).batch_of_run(context["run_id"])
        if batch is None or batch.state.terminal:
            return None
        log.info("batch %s of this run was planned by %s, whose XCom a later try cleared: rolling it back",
                 batch.batch_id, self.plan_task_id)
        return batch.batch_seq
