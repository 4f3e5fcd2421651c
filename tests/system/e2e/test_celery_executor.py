"""The clickstream DAG on the Celery executor, as production runs Airflow: Redis its broker, two
workers, the metadata on PostgreSQL, runs triggered through the scheduler.

1. The worker that runs the spark task dies with everything it forked (what a lost machine looks
   like). Airflow notices the missing heartbeats, fails that try, and gives the retry to the
   other worker; the batch commits once, and the ledger shows both attempts.
2. The spark task runs twice at once, the way Airflow 3 lets it happen (its Execution API starts
   no second copy of a queued task): the worker running it is frozen (SIGSTOP) past the heartbeat
   timeout, the retry runs on the other worker and commits, then the frozen copy is let go
   (SIGCONT) with its attempt already claimed in the ledger.

The audit of the real outputs finds every record once.

3. (slow set) The worker that runs the commit task dies with it after the COMMIT decision is in
   the ledger and before any output is committed (the task held at that fault point, since a
   commit is over in a second): the retry on the other worker finishes the commit the decision
   asks for."""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from onceflow.core import faults
from onceflow_devkit.local_airflow.runtime import CELERY_EXECUTOR, CELERY_WORKER
from tests.system.e2e.conftest import broker_with_topics, make_world

DAG_ID = "clickstream_exactly_once"
# A worker that stops heartbeating is noticed in seconds, not the default 5 minutes.
HEARTBEAT = {"AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
             "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2"}


def running_on(api, run_id: str, task_id: str, timeout: float = 180.0) -> dict:
    """The task instance once it runs and has its process id."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ti = next(t for t in api.task_instances(DAG_ID, run_id) if t["task_id"] == task_id)
        if ti["state"] == "running" and ti.get("pid"):
            return ti
        assert ti["state"] not in ("success", "failed", "upstream_failed"), ti
        time.sleep(0.2)
    raise AssertionError(f"{task_id} of {run_id} did not start within {timeout:.0f} s")


def worker_of(airflow, pid: int) -> str:
    """The worker component whose process tree holds ``pid``."""
    ancestors = {p.pid for p in psutil.Process(pid).parents()}
    (worker,) = [c for c in airflow.components if c.startswith(CELERY_WORKER) and airflow.process(c).running_pid() in ancestors]
    return worker


def signal_with_everything_it_forked(pid: int, signum: int) -> list[psutil.Process]:
    processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for process in processes:
        try:
            process.send_signal(signum)
        except psutil.NoSuchProcess:
            pass
    return processes


def spark_with_its_attempt_claimed(world, api, run_id: str) -> tuple[dict, str]:
    """The running spark task instance once it claimed its attempt, and the worker that runs it."""
    spark = running_on(api, run_id, "spark")
    deadline = time.monotonic() + 120
    while (batch := world.runtime.batch_of_run(run_id)) is None or batch.attempt < 1:
        assert time.monotonic() < deadline, f"the spark task claimed no attempt: {batch}"
        time.sleep(0.2)
    return spark, worker_of(world.airflow, spark["pid"])


def test_a_killed_worker_and_a_task_run_twice_lose_and_duplicate_nothing(tmp_path, postgres_server, redis_server,
                                                                         spark_connect_server, e2e_rest_catalog):
    with broker_with_topics() as broker:
        world = make_world(broker, tmp_path, postgres_server, HEARTBEAT, spark_connect_server, celery=redis_server,
                           catalog=e2e_rest_catalog)
        produced = world.produce(300, seed=31)
        conf = {"max_records_per_partition": 100}  # two partitions: 200 records a batch
        with world.airflow, world.airflow.api() as api:
            assert world.airflow.env()["AIRFLOW__CORE__EXECUTOR"] == CELERY_EXECUTOR
            worker_argv = psutil.Process(world.airflow.process(f"{CELERY_WORKER}-1").running_pid()).cmdline()
            assert not any(redis_server.password in arg for arg in worker_argv)  # the broker's secret is in its env only
            api.wait_for_dag(DAG_ID, timeout=180)
            api.unpause(DAG_ID)

            killed_run = api.trigger(DAG_ID, conf=conf)
            _, doomed = spark_with_its_attempt_claimed(world, api, killed_run)
            psutil.wait_procs(signal_with_everything_it_forked(world.airflow.process(doomed).running_pid(), signal.SIGKILL),
                              timeout=10)
            assert api.wait_for_run(DAG_ID, killed_run, timeout=600) == "success", api.explain(DAG_ID, killed_run)

            world.airflow.start()  # the killed worker comes back
            twice_run = api.trigger(DAG_ID, conf=conf)
            spark, frozen = spark_with_its_attempt_claimed(world, api, twice_run)
            stopped = signal_with_everything_it_forked(world.airflow.process(frozen).running_pid(), signal.SIGSTOP)
            try:
                assert api.wait_for_run(DAG_ID, twice_run, timeout=600) == "success", api.explain(DAG_ID, twice_run)
            finally:
                for process in stopped:
                    try:
                        process.send_signal(signal.SIGCONT)
                    except psutil.NoSuchProcess:
                        pass
            first_copy = psutil.Process(spark["pid"]) if psutil.pid_exists(spark["pid"]) else None
            if first_copy is not None:  # told by the Execution API that its try is over, it ends
                psutil.wait_procs([first_copy], timeout=120)
            assert not psutil.pid_exists(spark["pid"]) or psutil.Process(spark["pid"]).status() == psutil.STATUS_ZOMBIE

            for run_id in (killed_run, twice_run):
                tries = {t["task_id"]: t for t in api.task_instances(DAG_ID, run_id)}
                assert tries["spark"]["try_number"] == 2 and tries["commit"]["state"] == "success", tries

        for run_id in (killed_run, twice_run):
            batch = world.runtime.batch_of_run(run_id)
            assert batch.state.value == "committed" and batch.attempt == 2, batch  # the first copy's attempt, then the retry's
        report = world.audit()
        assert report.ok and report.input_records == produced and report.committed_batches == 2, report.summary()


@pytest.mark.slow  # 2 min; make test's Celery run is the test above
def test_a_worker_killed_in_the_commit_after_the_decision_leaves_the_commit_to_the_retry(
        tmp_path, postgres_server, redis_server, spark_connect_server, e2e_rest_catalog):
    # Every task process of the workers holds there; only the commit decides.
    held = {**HEARTBEAT, faults.ENV_VAR: "ledger.decision.after_write=hold"}
    with broker_with_topics() as broker:
        world = make_world(broker, tmp_path, postgres_server, held, spark_connect_server, celery=redis_server,
                           catalog=e2e_rest_catalog)
        produced = world.produce(200, seed=32)
        with world.airflow, world.airflow.api() as api:
            api.wait_for_dag(DAG_ID, timeout=180)
            api.unpause(DAG_ID)
            run_id = api.trigger(DAG_ID)
            try:
                commit = running_on(api, run_id, "commit", timeout=300)
            except AssertionError:
                raise AssertionError(api.explain(DAG_ID, run_id)) from None
            deadline = time.monotonic() + 120
            while (batch := world.runtime.batch_of_run(run_id)).decision is None:  # held just after writing it
                assert time.monotonic() < deadline, f"the commit decided nothing: {batch}"
                time.sleep(0.2)
            assert batch.decision.outcome.value == "COMMIT" and batch.state.value == "committing", batch
            doomed = worker_of(world.airflow, commit["pid"])
            psutil.wait_procs(signal_with_everything_it_forked(world.airflow.process(doomed).running_pid(), signal.SIGKILL),
                              timeout=10)
            assert api.wait_for_run(DAG_ID, run_id, timeout=600) == "success", api.explain(DAG_ID, run_id)
            tries = {t["task_id"]: t for t in api.task_instances(DAG_ID, run_id)}
            assert tries["commit"]["try_number"] == 2 and tries["spark"]["try_number"] == 1, tries

        batch = world.runtime.batch_of_run(run_id)
        assert batch.state.value == "committed", batch
        report = world.audit()
        assert report.ok and report.input_records == produced and report.committed_batches == 1, report.summary()
