"""A write whose stage Spark retries, on a local session: the zombie task of the failed stage attempt
and the retried stage's task are two task attempts of one split, both numbered 0 by
``TaskContext.attemptNumber()``. The sinks' data-source base names them apart (``taskAttemptId``), so
each stages under a name of its own and the commit publishes the voted one alone.

How the stage is made to fail: Spark retries a stage when a task cannot fetch its shuffle input
(``FetchFailed``). Tasks of split 0 and 1 start first (``local[2]``); split 0's stages its rows and
then waits, a zombie to be, and split 1's waits until the driver has unregistered the shuffle's map
outputs. Split 2's task then starts, finds no map output and fails the stage attempt; Spark reruns the
map stage and, in a new stage attempt, the splits not yet done (0 and 2). The retried split 0 stages
its copy; the zombie goes on only once the write is done. Spark's commit coordinator authorizes the
first attempt of a partition that asks, whichever stage attempt it belongs to: a zombie let go when the
retried task had staged (not yet committed) sometimes asked first, and the retried task's commit was
denied ("Commit denied for partition 0 ... stage N.1"), failing the write.

The kind under test is the SQLite example (tests/integration/examples/test_sqlite_sink.py), whose
staged rows carry their stage's name, so a shared name would publish both copies.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

from pyspark import TaskContext

from onceflow.core.coordinator import Coordinator
from onceflow.core.ledger.storage import deployment_ledger_storage
from onceflow.core.plan import Plan, SinkPlan
from onceflow.core.states import BatchState
from onceflow.sinks.api import BatchId, job_options
from onceflow_sqlite_sink.data_source import OnceflowSqliteDataSource, StagingWriter

from tests.integration.examples.test_sqlite_sink import SqliteHarness

SPLITS = 3
WAIT_S = 120


def _wait_for(flag: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not flag.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{flag.name} never came")
        time.sleep(0.05)


class StageRetryWriter(StagingWriter):
    """The SQLite kind's writer, each first task of splits 0 and 1 held back as the module says."""

    def stage(self, batches, task):
        staged = super().stage(batches, task)
        rendezvous = Path(self.options["rendezvous"])
        first = not (rendezvous / f"split-{task.split}").exists()
        (rendezvous / f"split-{task.split}").touch()
        context = TaskContext.get()  # what Spark says of the task, whatever the base made of it
        with open(rendezvous / f"staged-{task.split}-{context.taskAttemptId()}", "w") as out:
            json.dump({"split": task.split, "attempt_number": context.attemptNumber(), "stage": staged.staged["stage"],
                       "at": time.time()}, out)
        if first and task.split == 0:
            (rendezvous / "zombie-staged").touch()
            _wait_for(rendezvous / "retried-staged")
            _wait_for(rendezvous / "write-done")  # then Spark has killed the zombie: it never asks to commit
        elif first and task.split == 1:
            (rendezvous / "split-1-started").touch()
            _wait_for(rendezvous / "map-outputs-gone")
        elif task.split == 0:
            (rendezvous / "retried-staged").touch()
        return staged


class StageRetrySource(OnceflowSqliteDataSource):
    format = "onceflow_sqlite_stage_retry"
    writer_type = StageRetryWriter


def _lose_map_outputs(spark, rendezvous: Path) -> None:
    """Driver: once split 0's zombie has staged and split 1's task has started, unregister the map
    outputs of the write's shuffle (the newest one), as a lost executor would."""
    _wait_for(rendezvous / "zombie-staged")
    _wait_for(rendezvous / "split-1-started")
    tracker = spark.sparkContext._jsc.sc().env().mapOutputTracker()
    shuffle = max(int(s) for s in tracker.shuffleStatuses().keys().mkString(",").split(","))
    tracker.unregisterAllMapAndMergeOutput(shuffle)
    (rendezvous / "map-outputs-gone").touch()


def test_a_retried_stage_task_and_its_zombie_stage_apart_and_only_the_voted_one_is_published(spark, tmp_path):
    harness = SqliteHarness(tmp_path, splits=SPLITS)
    deployment, rendezvous = harness.deployment, tmp_path / "rendezvous"
    rendezvous.mkdir()
    coordinator = Coordinator(deployment_ledger_storage(deployment), harness.pipeline,
                              {harness.sink.name: harness.participant()})
    plan = coordinator.plan_new_batch(lambda seq: Plan(harness.pipeline, seq, (), (SinkPlan("counts", "sqlite", SPLITS),)))
    seq, attempt = plan.batch_seq, coordinator.begin_attempt(plan.batch_seq)
    rows = [{"key": f"k{i}", "value": i} for i in range(30)]

    StageRetrySource.register(spark)
    breaker = threading.Thread(target=_lose_map_outputs, args=(spark, rendezvous), daemon=True)
    breaker.start()
    spark.conf.set("spark.sql.adaptive.enabled", "false")  # the shuffle and the write in one job
    try:
        (harness.frame(spark, rows).repartition(SPLITS).write.format(StageRetrySource.format).mode("append")
         .options(**job_options(harness.pipeline, deployment.to_option(), "counts", seq, plan.created_at_ms, attempt),
                  database=harness.database, table="counts", batch_id=str(BatchId(seq)), rendezvous=str(rendezvous))
         .save())
    finally:
        (rendezvous / "write-done").touch()
        spark.conf.unset("spark.sql.adaptive.enabled")
        breaker.join(timeout=WAIT_S)

    staged = [json.loads(p.read_text()) for p in rendezvous.glob("staged-0-*")]
    assert [s["attempt_number"] for s in staged] == [0, 0], f"no stage retry: split 0 staged by {staged}"
    assert len({s["stage"] for s in staged}) == 2, f"two task attempts of split 0 staged as one: {staged}"
    status = coordinator.commit(seq)
    assert status.state is BatchState.COMMITTED, status
    voted = [s["stage"] for s in status.votes["counts"].payload["splits"] if s["split"] == 0]
    assert len(voted) == 1 and voted[0] in {s["stage"] for s in staged}
    harness.participant().after_commit(plan)
    assert Counter(harness.visible()) == Counter((str(BatchId(seq)), r["key"], r["value"]) for r in rows)
    assert harness.held(seq) == []
