"""What the protocol tasks run on an Airflow worker for their DAG run's batch (``BatchSteps``): the
runtime from the pipeline's connections, the plan, and the Asset events of what a task finished.

The plan task runs ``BatchSteps.plan``; in a DAG built with ``plan_in_spark_task=True`` the spark
task runs it in its own process before its job. Either way the batch is in the ledger and in XCom
(``PLAN_XCOM_KEY``) before any output is touched, and commit and rollback read it from there.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException, AirflowSkipException

from onceflow.core.ledger.ledger import BATCH_EFFECT
from onceflow.core.planning import run_inputs
from onceflow.core.batch_id import BatchId
from onceflow.core.states import BatchState
from onceflow.pipeline.spec import INTERVAL
from onceflow.airflow import metrics
from onceflow.airflow.assets import announce, announced_batches
from onceflow.airflow.deployed import PLAN_XCOM_KEY, DeployedPipeline
from onceflow.core import faults
from onceflow.core.errors import ConcurrentPlanError
from onceflow.core.lag import input_lag
from onceflow.core.planning.intervals import Interval, PlanMustWait, ReprocessRefused
from onceflow.sinks import reprocessing

log = logging.getLogger(__name__)


def _on_finished(runtime, finished: list[int], seq: int) -> None:
    """A batch this task finished: remember it (for its Asset events), report its metrics."""
    finished.append(seq)
    _emit_metrics(runtime, seq)


def _emit_metrics(runtime, seq: int) -> None:
    """Airflow metrics of a batch this task finished, with the input lag behind it."""
    try:
        lag = input_lag(runtime)
    except Exception as exc:  # Kafka unreachable now: the batch is finished all the same
        log.warning("input lag not measured for the metrics: %s", exc)
        lag = None
    metrics.batch_finished(runtime.reader.describe(seq), runtime.spec, lag)


def task_identity(context) -> str:
    """Who does what a task writes (the ledger's ``done_by``): its run, task, try, host and process."""
    ti = context["ti"]
    return f"airflow:{ti.dag_id}/{ti.run_id}/{ti.task_id}#try{ti.try_number}@{os.uname().nodename}:{os.getpid()}"


def task_runtime(context, deployed):
    """Where every task that runs protocol steps starts: arm the run's injected
    faults (test deployments only), then build the runtime from the connections."""
    faults.arm_run_param((context.get("params") or {}).get(faults.RUN_PARAM))
    return deployed.runtime(identity=task_identity(context))


def planned_seq(context, plan_task_id: str, task_id: str) -> int:
    """The batch the run's planning task planned (its XCom ``PLAN_XCOM_KEY``)."""
    planned = context["ti"].xcom_pull(task_ids=plan_task_id, key=PLAN_XCOM_KEY)
    if not planned or "batch_seq" not in planned:
        raise RuntimeError(
            f"task {task_id}: the task {plan_task_id!r} that plans this run's batch left no batch in XCom; "
            f"clear the whole run so that {plan_task_id} runs first"
        )
    return int(planned["batch_seq"])


# How many aborted batches in a row a plan looks past for the committed one before them.
UNANNOUNCED_LOOKBACK = 10


class BatchSteps:
    """The protocol steps one task's execution runs for its DAG run's batch, on an Airflow worker: the
    runtime from the pipeline's connections, the plan (the plan task's, or the spark task's in a DAG
    without one), and the Asset events of the batches it finished. One per execution: it remembers
    what that execution finished."""

    def __init__(self, deployed: DeployedPipeline, task_id: str, plan_task_id: str):
        self.deployed = deployed
        self.pipeline = deployed.spec
        self.task_id = task_id
        self.plan_task_id = plan_task_id
        self._finished: list[int] = []

    def runtime(self, context):
        runtime = task_runtime(context, self.deployed)
        runtime.check_kafka()
        # Whichever task finishes a batch (commit, rollback, a plan's recovery) reports it, once.
        runtime.coordinator.on_finished = functools.partial(_on_finished, runtime, self._finished)
        return runtime

    def announce(self, context, runtime, also: int | None = None, newest_before=None) -> None:
        """Asset events for each committed batch no event carries yet, among: the batches this task
        finished, ``also`` (this run's batch), and the newest committed batch at or before
        ``newest_before`` (a status; the plan's: a batch ``onceflow recover`` committed has no
        task to announce it, nor has one whose task died before Airflow recorded its events). The
        events already recorded are read through the alias (every protocol task's inlet), so a
        batch is announced once whichever tasks see it."""
        statuses = [runtime.reader.describe(seq) for seq in dict.fromkeys([*self._finished, *([also] if also else [])])]
        status = newest_before
        for _ in range(UNANNOUNCED_LOOKBACK):  # past the aborted batches that may follow it
            if status is None or status.state is not BatchState.ABORTED:
                break
            status = runtime.reader.describe(status.batch_seq - 1) if status.batch_seq > 1 else None
        committed = {s.batch_seq: s for s in [*statuses, status] if s is not None and s.state is BatchState.COMMITTED}
        if not committed:
            return
        carried = announced_batches(context["inlet_events"], self.pipeline)
        for status in committed.values():
            if status.batch_id in carried:
                continue
            announce(context["outlet_events"], self.pipeline, self.deployed.warehouse, status)
            log.info("batch %s of %s announced to the DAGs downstream of its outputs (finished by %s)",
                     status.batch_id, self.pipeline.name, status.done[BATCH_EFFECT].done_by)

    def planned_seq(self, context) -> int:
        return planned_seq(context, self.plan_task_id, self.task_id)

    def plan(self, context, dag) -> tuple[dict[str, Any], Any]:
        """Recover any unfinished batch, then bind this DAG run to its batch, in the ledger, and leave it in
        XCom (``PLAN_XCOM_KEY``) before any output is touched. Returns the batch (the plan task's XCom,
        ``{"batch_seq", "batch_id", "records", "ranges"}``) and the runtime that planned it. A retry gets
        the plan its run wrote before; AirflowSkipException: the run's batch is already committed."""
        try:
            inputs = run_inputs.read_run_inputs(self.pipeline.name, getattr(context.get("dag_run"), "conf", None),
                                                context.get("params") or {}, (context.get("dag") or dag).params.keys(),
                                                self.pipeline.run_params.keys())
        except run_inputs.RunParamsRefused as refused:
            log.error("%s", refused)
            raise AirflowFailException(str(refused)) from None  # no retry: the run's conf will not change
        if self.pipeline.batches == INTERVAL:
            plan, runtime = self._plan_interval(context, inputs)
            return self._push(context, plan), runtime
        plan, runtime = self._plan_offsets(context, inputs)
        planned = self._push(context, plan)  # before the aftermath of the batch before it, which may fail
        if plan.batch_seq > 1:
            # plan_next first recovered the previous batch: if that finished a
            # commit some earlier task could not, finish its aftermath too.
            previous = runtime.coordinator.describe(plan.batch_seq - 1)
            if previous is not None and previous.state is BatchState.COMMITTED:
                runtime.after_commit(previous.plan)
            self.announce(context, runtime, newest_before=previous)  # what recovery finished, here or elsewhere
        else:
            self.announce(context, runtime)
        return planned, runtime

    def _push(self, context, plan) -> dict[str, Any]:
        """The run's batch, logged and left in XCom for the tasks after this one."""
        planned = self._planned(plan)
        context["ti"].xcom_push(key=PLAN_XCOM_KEY, value=planned)
        return planned

    def _plan_offsets(self, context, inputs: run_inputs.RunInputs):
        refusal = backfill_refusal(self.pipeline.name, context)
        if refusal:
            log.error(refusal)
            raise AirflowFailException(refusal)  # no retry: the run type will not change
        runtime = self.runtime(context)
        coordinator = runtime.coordinator
        run_id = context["run_id"]
        done = runtime.batch_of_run(run_id)
        if done is not None and done.state is BatchState.COMMITTED:
            self._skip_committed(done.plan)
        runtime.check_outputs()
        with runtime.offset_source() as source:
            plan = coordinator.plan_next(source, runtime.plan_config(inputs), run_id=run_id)
        return plan, runtime

    def _plan_interval(self, context, inputs: run_inputs.RunInputs):
        """An interval pipeline's run: the batch of its data interval (``onceflow.core.planning.interval_planner``)."""
        interval = run_interval(self.pipeline.name, context)
        runtime = self.runtime(context)
        runtime.check_outputs()
        reprocess = functools.partial(reprocessing, self.pipeline) if inputs.replace_committed else None
        try:
            with runtime.offset_source() as source:
                planned = runtime.interval_planner(inputs).plan(source, interval, context["run_id"], reprocess)
        except (ReprocessRefused, ConcurrentPlanError) as refused:
            log.error("%s", refused)
            raise AirflowFailException(str(refused)) from None  # no retry: the outcome would be the same
        except PlanMustWait as wait:
            # Rescheduled, not retried: the task frees its worker slot and keeps its tries.
            log.info("%s Looking again in %d s.", wait, INTERVAL_POKE.total_seconds())
            raise AirflowRescheduleException(datetime.now(timezone.utc) + INTERVAL_POKE) from None
        self.announce(context, runtime)  # what its recovery finished, if anything
        if planned.already_committed:
            runtime.after_commit(planned.plan)  # idempotent: finishes an aftermath a crash cut short
            self._skip_committed(planned.plan, f"to replace its outputs, run it with {run_inputs.REPLACE_COMMITTED}=true")
        replaces = planned.plan.replaces
        log.info("run %s reads interval %s%s", context["run_id"], planned.plan.interval,
                 f", replacing committed batch {BatchId(replaces.batch_seq)} ({dict(replaces.outputs)})" if replaces else "")
        return planned.plan, runtime

    def _skip_committed(self, plan, hint: str = "") -> None:
        """A cleared or re-run run whose batch is committed: say so in the task
        log (the skip reason alone does not always reach it), then skip the run."""
        message = f"batch {plan.batch_id} of {self.pipeline.name} (this run's) is already committed: nothing to do"
        message += f" ({hint})" if hint else ""
        log.info(message)
        raise AirflowSkipException(message)

    def _planned(self, plan) -> dict[str, Any]:
        """The log line and XCom of the batch this run processes."""
        ranges = [r.to_dict() for r in plan.ranges]
        log.info(
            "batch %s of %s: %d records in %d partition ranges%s: %s",
            plan.batch_id, self.pipeline.name, plan.records, len(ranges),
            f" (replays aborted batch {BatchId(plan.replay_of)})" if plan.replay_of else "",
            json.dumps(ranges),
        )
        return {"batch_seq": plan.batch_seq, "batch_id": plan.batch_id, "records": plan.records, "ranges": ranges}


# How long a plan task waiting for its interval to close sleeps between looks.
INTERVAL_POKE = timedelta(seconds=30)


def backfill_refusal(pipeline: str, context) -> str | None:
    """Why this run of an offsets pipeline must not plan, or None. Its batches
    form a sequence: each run takes the next offsets after the last committed
    batch, whatever its logical date. A backfill run would not read its data
    interval, and would run beside other runs that abort its batches: refuse
    it at once."""
    dag_run = context.get("dag_run")
    run_type = getattr(getattr(dag_run, "run_type", None), "value", getattr(dag_run, "run_type", None))
    if run_type != "backfill":
        return None
    interval = f"{context.get('data_interval_start')} to {context.get('data_interval_end')}"
    return (
        f"pipeline {pipeline!r} plans its batches as a sequence of offsets, not by data interval: this backfill run "
        f"({interval}) would read whatever comes next in Kafka, not the records of its interval, so it is refused "
        "and nothing was read. Trigger ordinary runs to catch up (each takes the next batch), or declare "
        "batches='interval' in the pipeline's spec (a new pipeline name) to backfill by data interval."
    )


def run_interval(pipeline: str, context):
    """The DAG run's data interval, for an interval pipeline; AirflowFailException if it has none."""
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None or end <= start:
        raise AirflowFailException(
            f"pipeline {pipeline!r} reads data intervals (batches='interval'), but run {context['run_id']} has none "
            f"({start} to {end}): its DAG needs a schedule with data intervals (pipeline_dag gives a cron schedule "
            "one), and a manual run must be triggered for a logical date. Nothing was read."
        )
    return Interval(int(start.timestamp() * 1000), int(end.timestamp() * 1000))
