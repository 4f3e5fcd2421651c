"""Pre-commit every output of one batch attempt (Spark driver).

Call sequence::

    plan    = coordinator.plan(seq)               the immutable plan (I6)
    attempt = coordinator.begin_attempt(seq)      fences every older attempt (I5)
    records = format("onceflow_kafka_range")      exactly the planned ranges, the spec's input_columns, cached once
    outputs = spec.apply_transform(records, plan) {sink name: DataFrame}
    per sink, repartitioned to the plan's splits (one after another, or at once: a driver thread each):
        its kind's pre_commit (onceflow.sinks)    files: staged Parquet; kafka: open transactions;
                                                  the data source's commit votes -> ledger

Nothing here commits: the Airflow commit task does, from the votes. A job
that dies leaves staging and open transactions that the rollback task (or
the next run's recovery) aborts.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable

from onceflow.core import faults
from onceflow.core.batch_id import BatchId
from onceflow.core.participant import Vote
from onceflow.core.plan import NO_GUARANTEE
from onceflow.core.states import BatchState
from onceflow.sinks import sink_kind
from onceflow.sinks.api import job_options
from onceflow.sources.kafka import data_source as kafka_source

log = logging.getLogger(__name__)

JOB_AFTER_ATTEMPT = faults.declare("job.after_attempt", "Spark job: attempt claimed, nothing written yet")
JOB_BETWEEN_OUTPUTS = faults.declare("job.between_outputs", "Spark job: one output pre-committed and voted, another not yet")
JOB_AFTER_VOTES = faults.declare("job.after_votes", "Spark job: every output pre-committed and voted, job not yet exited")


@dataclass(frozen=True)
class JobResult:
    batch_seq: int
    attempt: int
    input_records: int
    outputs: tuple[str, ...]
    # Wall seconds: "read" (the input read and cached), "outputs" (every output pre-committed and
    # voted), and each output's own pre-commit and vote by its sink's name, which includes computing
    # that output from the cached input (outputs written at once overlap: they add up to more).
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self, pipeline: str) -> dict:
        """What the job reports (its last line under spark-submit, the spark task's XCom under Spark Connect)."""
        return {"pipeline": pipeline, "batch": self.batch_seq, "attempt": self.attempt,
                "input_records": self.input_records, "outputs": list(self.outputs),
                "seconds": {k: round(v, 2) for k, v in self.seconds.items()}}


def register_data_sources(spark, spec) -> None:
    """The input's data source, and the one of each sink kind the pipeline writes."""
    kafka_source.register(spark)
    for module in sorted({sink_kind(s.kind).data_source for s in spec.sinks}):
        importlib.import_module(module).register(spark)


def read_input(spark, spec, ranges, deployment: str):
    """The batch's input records: exactly ``ranges``, only the spec's ``input_columns`` (driver).

    Through onceflow's range source, not Spark's Kafka source: within the job, which caches its input
    once, the two read at the same speed, and this one needs no jar and keeps Kafka's secrets out of the
    query plan (benchmarks/README.md, "Reading planned ranges")."""
    reader = (
        spark.read.format("onceflow_kafka_range")
        .option("ranges", json.dumps([r.to_dict() for r in ranges]))
        .option("deployment", deployment)
    )
    if spec.input_columns:
        reader = reader.option("columns", ",".join(spec.input_columns))
    return reader.load()


def release(records) -> None:
    """Drop the cached input, also after a failure: a Spark Connect server outlives the job."""
    try:
        records.unpersist()
    except Exception as exc:  # the session or server is gone: nothing is cached there any more
        log.warning("could not release the cached input: %s", exc)


# How many batches back ``written_already`` looks for an uncommitted one whose ranges this batch's overlap.
WRITTEN_LOOKBACK = 10


def written_already(coordinator, plan, attempt: int) -> str | None:
    """Why some of this batch's records may already have been written by a job before this one
    (None: they cannot have been): what an output of guarantee ``none`` must never write again.
    A replay cut short (a split, fewer records per partition) leaves the rest of the aborted
    batch's ranges to the batches after it, so every batch back to the last committed one that
    replays nothing is looked at."""
    if attempt > 1:
        return f"attempt {attempt - 1} of this batch may have written them"
    if plan.replaces is not None:
        return f"this batch reprocesses committed batch {BatchId(plan.replaces.batch_seq)}"
    for seq in range(plan.batch_seq - 1, max(0, plan.batch_seq - 1 - WRITTEN_LOOKBACK), -1):
        earlier = coordinator.describe(seq)
        if earlier.state is not BatchState.COMMITTED and overlapping(earlier.plan.ranges, plan.ranges):
            return f"{'this batch replays' if seq == plan.replay_of else 'it overlaps'} batch {earlier.batch_id}, " \
                   f"{earlier.state.value}, whose job may have written them"
        if earlier.state is BatchState.COMMITTED and earlier.plan.replay_of is None:
            break
    return None


def overlapping(ranges, others) -> bool:
    """Whether any offset range of ``ranges`` shares a record with one of ``others``."""
    return any(a.topic == b.topic and a.partition == b.partition and a.start < b.end and b.start < a.end
               for a in ranges for b in others)


def pre_commit_in_turn(sinks, pre_commit: Callable) -> dict[str, float]:
    """Each output's pre-commit and vote, one after another; each one's seconds by sink name."""
    seconds = {}
    for i, sink in enumerate(sinks):
        if i:
            faults.fault_point(JOB_BETWEEN_OUTPUTS)
        seconds[sink.name] = pre_commit(sink)
    return seconds


def pre_commit_at_once(sinks, pre_commit: Callable) -> dict[str, float]:
    """Every output's pre-commit and vote at once, a driver thread each (Spark Connect: the server runs
    their queries side by side); each one's seconds by sink name. ``pre_commit`` carries the job's
    session and tags into its thread (pyspark's ``inheritable_thread_target``). The fault point between outputs
    fires when the first is voted, the others running or done, their votes not yet seen. The first
    failure is raised at once, the others left running: the caller stops what runs on (a Spark
    Connect job interrupts its tag), and the next attempt fences whatever it wrote."""
    pool = ThreadPoolExecutor(max_workers=len(sinks), thread_name_prefix="onceflow-output")
    futures = {pool.submit(pre_commit, sink): sink.name for sink in sinks}
    seconds = {}
    try:
        for done in as_completed(futures):
            seconds[futures[done]] = done.result()
            if len(seconds) == 1 and len(sinks) > 1:
                faults.fault_point(JOB_BETWEEN_OUTPUTS)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return {sink.name: seconds[sink.name] for sink in sinks}


def run_batch(spark, runtime, seq: int, outputs_at_once: bool = False) -> JobResult:
    """Pre-commit every output of batch ``seq`` (see the module's call sequence). ``outputs_at_once``:
    a driver thread per output (what a Spark Connect client does); otherwise one after another."""
    coordinator = runtime.coordinator
    spec = runtime.spec
    runtime.check_kafka()
    plan = coordinator.plan(seq)
    attempt = coordinator.begin_attempt(seq)
    log.info("batch %s of %s: attempt %d, %d records planned", plan.batch_id, spec.name, attempt, plan.records)
    faults.fault_point(JOB_AFTER_ATTEMPT)
    register_data_sources(spark, spec)
    deployment = runtime.deployment.to_option()

    started = time.perf_counter()
    records = read_input(spark, spec, plan.ranges, deployment).cache()
    try:
        input_records = records.count()
        seconds = {"read": time.perf_counter() - started}
        outputs = spec.apply_transform(records, plan)
        missing = sorted({s.name for s in spec.sinks} - outputs.keys())
        if missing:
            raise ValueError(f"transform {spec.transform} returned no DataFrame for sink(s) {missing} of pipeline {spec.name!r}")

        # A reprocessed interval: the committed batch it replaces.
        replaces = plan.replaces.batch_seq if plan.replaces is not None else None
        none_outputs = any(plan.sink(s.name).guarantee == NO_GUARANTEE for s in spec.sinks)
        written_before = written_already(coordinator, plan, attempt) if none_outputs else None

        def pre_commit(sink) -> float:
            started = time.perf_counter()
            sink_plan = plan.sink(sink.name)
            if sink_plan.guarantee == NO_GUARANTEE and written_before:
                # At most once: records an earlier attempt or batch may have written are never written again.
                coordinator.record_vote(seq, attempt, Vote(sink.name, seq, attempt, {"not_written": written_before}))
                log.info("batch %s: %s not written (guarantee none: %s)", plan.batch_id, sink.name, written_before)
                return time.perf_counter() - started
            frame = outputs[sink.name].repartition(sink_plan.splits)
            options = job_options(spec.name, deployment, sink.name, seq, plan.created_at_ms, attempt, replaces)
            sink_kind(sink.kind).pre_commit(frame, sink, sink_plan, runtime.deployment, options)
            took = time.perf_counter() - started
            log.info("batch %s: %s pre-committed and voted in %.1f s", plan.batch_id, sink.name, took)
            return took

        started = time.perf_counter()
        if outputs_at_once:
            from pyspark import inheritable_thread_target

            # The job's session and its tag (a Spark Connect job is interrupted by it) in every thread.
            seconds.update(pre_commit_at_once(spec.sinks, inheritable_thread_target(spark)(pre_commit)))
        else:
            seconds.update(pre_commit_in_turn(spec.sinks, pre_commit))
        seconds["outputs"] = time.perf_counter() - started
        faults.fault_point(JOB_AFTER_VOTES)
    finally:
        release(records)
    return JobResult(seq, attempt, input_records, tuple(s.name for s in spec.sinks), seconds)
