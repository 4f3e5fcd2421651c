"""Batches as Spark Connect clients of a long-running server, below Airflow.

Real Spark Connect server (PySpark's own), real broker, the ledger on a local
warehouse; the audit reads the real outputs. What users of the Spark Connect
mode care about: every batch commits exactly once; batches of the same code
share one session, so the server does not gather Python processes batch after
batch; a client killed mid-job and a restarted server are just failed or new
attempts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from unittest import mock

import pytest

from onceflow.spark.shipping import shipped_code
from onceflow.spark.connect import (CONNECT_MODE_VAR, MAX_GENERATIONS, _generation_hint, _read_hint, close_client,
                                    code_session_id, connect_mode, join_session,
                                    run_connect_batch, session_url)
from onceflow_devkit.audit.clickstream_audit import audit_clickstream
from onceflow_devkit.services.process import TCP_ESTABLISHED, ManagedProcess, tcp_sockets
from onceflow_devkit.services.spark_connect import TOKEN_VAR, start_connect_server
from tests.conftest import TEST_HOME
from tests.integration.spark.test_batch_job import clickstream_runtime, produce

CLIENT = """
import sys
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow.spark.connect import run_connect_batch
from onceflow.pipeline.spec import PipelineSpec
spec = PipelineSpec.from_json(sys.argv[2])
runtime = PipelineRuntime(spec, Deployment.from_option(sys.argv[3]))
run_connect_batch(sys.argv[1], runtime, int(sys.argv[4]), sys.argv[5].split(","))
"""

# An Airflow task in Spark Connect mode: SIGTERM (a task marked failed, a timeout, a worker shutting down)
# calls the operator's on_kill, which is ConnectBatchJob.interrupt (airflow/operators/spark.py), and the task goes on.
KILLED_TASK = """
import signal, sys, threading, time
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow.spark.connect import ConnectBatchJob
from onceflow.pipeline.spec import PipelineSpec
spec = PipelineSpec.from_json(sys.argv[2])
job = ConnectBatchJob(sys.argv[1], PipelineRuntime(spec, Deployment.from_option(sys.argv[3])), int(sys.argv[4]),
                      sys.argv[5].split(","))
signal.signal(signal.SIGTERM, lambda *_: job.interrupt())
def announce():
    while job.session_id is None:
        time.sleep(0.05)
    print(job.session_id, job.tag, flush=True)
threading.Thread(target=announce, daemon=True).start()
job.run()
"""


def _connections_to(port: int, but_of: int | None = None) -> int:
    """Established TCP connections to ``port`` on this machine, but those of process ``but_of``."""
    import psutil

    total = sum(state == TCP_ESTABLISHED and remote == port for _local, remote, state, _inode in tcp_sockets())
    try:
        own = 0 if but_of is None else sum(c.status == psutil.CONN_ESTABLISHED and bool(c.raddr) and c.raddr.port == port
                                           for c in psutil.Process(but_of).net_connections(kind="tcp"))
    except psutil.NoSuchProcess:
        own = 0
    return total - own


def python_workers(server_pid: int) -> int:
    """The Python processes (daemons and their workers) the server's JVM runs."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=True).stdout
    children: dict[int, list[tuple[int, str]]] = {}
    for line in out.splitlines():
        pid, ppid, args = line.split(None, 2)
        children.setdefault(int(ppid), []).append((int(pid), args))
    count, todo = 0, [server_pid]
    while todo:
        for pid, args in children.get(todo.pop(), []):
            count += "pyspark" in args
            todo.append(pid)
    return count


def plan_next(pipeline):
    with pipeline.offset_source() as source:
        return pipeline.coordinator.plan_next(source, pipeline.plan_config(), run_id=f"run-{uuid.uuid4().hex[:6]}")


def commit(pipeline, plan) -> str:
    status = pipeline.coordinator.commit(plan.batch_seq)
    pipeline.after_commit(plan)
    return status.state.value


@pytest.fixture
def pipeline(one_kafka_broker, tmp_path):
    # The mode is the subject, not the broker: one broker covers it.
    return clickstream_runtime(one_kafka_broker, tmp_path)


def test_batches_of_the_same_code_share_one_session_and_commit_exactly_once(spark_connect_server, pipeline, one_kafka_broker):
    code = shipped_code(pipeline.spec)
    workers = []
    for n in range(3):
        produce(one_kafka_broker, pipeline.spec.topics[0], 500, seed=n)
        plan = plan_next(pipeline)
        result = run_connect_batch(spark_connect_server.url, pipeline, plan.batch_seq, code)
        assert (result.input_records, result.attempt) == (plan.records, 1)
        assert commit(pipeline, plan) == "committed"
        workers.append(python_workers(ManagedProcess("spark-connect", TEST_HOME / "spark-connect").running_pid()))
    # The test process is left as it was: its local Spark sessions (and the spark-submits of the
    # Airflows it starts, which inherit its environment) are not turned into Spark Connect clients.
    assert CONNECT_MODE_VAR not in os.environ
    joined = join_session(spark_connect_server.url, code)
    # (the generation this machine last joined: 0 unless a server on this port closed sessions before)
    assert joined.session_id == code_session_id(code, _read_hint(_generation_hint(spark_connect_server.url, code)))
    close_client(joined)
    # A session joined after another one closed is the process's active one: a transform's
    # F.udf(f, "int") parses its DDL with it (a spark task retried in the same process).
    again = join_session(spark_connect_server.url, code)
    try:
        with connect_mode():
            from pyspark.sql import functions as F

            assert F.udf(len, "int").returnType.simpleString() == "int"
    finally:
        close_client(again)
    # The second and third batches reuse the first one's Python workers.
    assert workers[2] <= workers[1], workers
    report = audit_clickstream(pipeline)
    assert report.ok, report.summary()
    assert report.input_records == 1500


def test_a_closed_session_is_followed_by_the_next_generation_which_this_machine_remembers(spark_connect_server, pipeline):
    code = shipped_code(pipeline.spec)
    hint = _generation_hint(spark_connect_server.url, code)
    first = join_session(spark_connect_server.url, code)
    generation = next(g for g in range(MAX_GENERATIONS) if code_session_id(code, g) == first.session_id)
    first.stop()  # releases the session: the server closes it, and refuses it from now on
    second = join_session(spark_connect_server.url, code)
    assert second.session_id == code_session_id(code, generation + 1) and _read_hint(hint) == generation + 1
    close_client(second)
    # The next join starts at the remembered generation: it never asks for the closed one again.
    asked = []
    real_id = code_session_id
    with mock.patch("onceflow.spark.connect.code_session_id", lambda zips, g: asked.append(g) or real_id(zips, g)):
        close_client(join_session(spark_connect_server.url, code))
    assert asked[-1:] == [generation + 1] and generation not in asked


def token_env(server) -> dict[str, str]:
    """The server's token for a client process, in the Spark Connect client's own variable: never an argument."""
    return {TOKEN_VAR: server.token}


def test_a_client_without_the_servers_token_is_refused_at_once_naming_the_setting(spark_connect_server, pipeline):
    from onceflow.config.settings import ConfigurationError

    code = shipped_code(pipeline.spec)
    for url, said in ((spark_connect_server.address, "No authentication token provided; the client sent no token"),
                      (f"{spark_connect_server.address}/;token=not-the-token", "Invalid authentication token")):
        started = time.monotonic()
        with pytest.raises(ConfigurationError) as refused:
            join_session(url, code)
        assert time.monotonic() - started < 15
        message = str(refused.value)
        assert f"the Spark Connect server at localhost:{spark_connect_server.port} refused this client ({said}" in message
        assert "set the spark connection's password" in message and "not-the-token" not in message


def run_client(server, pipeline, plan, code, faults: str) -> subprocess.CompletedProcess:
    """One attempt of the batch in a client process of its own, with ``faults`` armed."""
    return subprocess.run(
        [sys.executable, "-c", CLIENT, server.address, pipeline.spec.to_json(), pipeline.deployment.to_option(),
         str(plan.batch_seq), ",".join(code)],
        env={**os.environ, **token_env(server), "ONCEFLOW_FAULTS": faults}, capture_output=True, text=True, timeout=120,
    )


def test_failed_and_killed_clients_are_fenced_by_the_next_attempt(spark_connect_server, pipeline, one_kafka_broker):
    code = shipped_code(pipeline.spec)
    produce(one_kafka_broker, pipeline.spec.topics[0], 800, seed=4)
    plan = plan_next(pipeline)
    # A job that fails after voting ends its client process (once, gRPC's close at exit hung it).
    failed = run_client(spark_connect_server, pipeline, plan, code, "job.after_votes=raise")
    assert failed.returncode == 1 and "InjectedFault" in failed.stderr, failed.stderr[-2000:]
    # The next client dies (SIGKILL-like) once one output is pre-committed and voted, the others written at
    # once beside it: running on the server or done, left there by the client.
    killed = run_client(spark_connect_server, pipeline, plan, code, "job.between_outputs=crash")
    assert killed.returncode == 137, killed.stderr[-2000:]
    voted = set(pipeline.coordinator.describe(plan.batch_seq).votes)
    assert voted and voted <= {s.name for s in pipeline.spec.sinks}, voted

    result = run_connect_batch(spark_connect_server.url, pipeline, plan.batch_seq, code)
    assert result.attempt == 3
    assert commit(pipeline, plan) == "committed"
    report = audit_clickstream(pipeline)
    assert report.ok, report.summary()
    assert report.input_records == 800


def test_a_stopped_task_interrupts_its_queries_on_the_server(spark_connect_server, pipeline, one_kafka_broker,
                                                            pause_one_broker):
    from pyspark.sql.connect.session import SparkSession

    code = shipped_code(pipeline.spec)
    produce(one_kafka_broker, pipeline.spec.topics[0], 400, seed=5)
    plan = plan_next(pipeline)
    # The broker hangs, so the job's first query (reading the input, on the server's Python workers) waits
    # there for a minute: the query an Airflow task stopped meanwhile would leave running, detached.
    broker_port = int(one_kafka_broker.bootstrap.rsplit(":", 1)[1])
    before = _connections_to(broker_port)
    with pause_one_broker():
        task = subprocess.Popen(
            [sys.executable, "-c", KILLED_TASK, spark_connect_server.address, pipeline.spec.to_json(),
             pipeline.deployment.to_option(), str(plan.batch_seq), ",".join(code)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **token_env(spark_connect_server)})
        try:
            session_id, tag = task.stdout.readline().split()
            # The read has begun when the server's Python worker connects to the broker (a stopped broker's
            # kernel still accepts the connection); the reader then waits up to 60 s for records.
            deadline = time.monotonic() + 90
            # (the task's own connections are its check of the cluster, which a hung broker lets go on after a wait)
            while _connections_to(broker_port, but_of=task.pid) <= before:
                assert time.monotonic() < deadline and task.poll() is None, "the job never started reading"
                time.sleep(0.2)
            time.sleep(1)
            task.send_signal(signal.SIGTERM)
            _, stderr = task.communicate(timeout=30)  # at once: it starts no further query
        finally:
            task.kill()
        assert task.returncode == 1 and "JobStopped: the task was stopped" in stderr, stderr[-3000:]
        assert f"interrupted 1 Spark Connect operation(s) tagged {tag}" in stderr, stderr[-3000:]
        # A client of its own, while the broker still hangs: nothing of the job is left running on the server.
        other = SparkSession.builder.remote(session_url(spark_connect_server.url, session_id)).create()
        try:
            assert other.interruptTag(tag) == []
        finally:
            close_client(other)
    # The next attempt of the batch runs and commits it: the stopped one only failed.
    result = run_connect_batch(spark_connect_server.url, pipeline, plan.batch_seq, code)
    assert result.attempt == 2 and commit(pipeline, plan) == "committed"
    report = audit_clickstream(pipeline)
    assert report.ok and report.input_records == 400, report.summary()


@pytest.mark.slow  # 40 s; make test's bounded Spark Connect chaos run kills and restarts the server mid-job
def test_a_restarted_server_is_joined_again_with_the_code_added_anew(pipeline, one_kafka_broker, tmp_path):
    code = shipped_code(pipeline.spec)
    produce(one_kafka_broker, pipeline.spec.topics[0], 600, seed=5)
    proc = ManagedProcess("spark-connect-restarted", tmp_path / "spark-connect").reset()
    try:
        for restart in range(2):
            server = start_connect_server(proc, die_with_parent=True)
            plan = plan_next(pipeline)
            result = run_connect_batch(server.url, pipeline, plan.batch_seq, code)
            assert result.input_records == plan.records
            assert commit(pipeline, plan) == "committed"
            proc.stop(grace=5)
            if not restart:
                produce(one_kafka_broker, pipeline.spec.topics[0], 400, seed=6)
    finally:
        proc.stop(grace=2)
    report = audit_clickstream(pipeline)
    assert report.ok, report.summary()
    assert report.input_records == 600 + 400


WORKER_POINT = "kafka.precommit.after_flush=raise"


@pytest.fixture
def planned(pipeline, one_kafka_broker, monkeypatch):
    """(the shipped code, a planned batch of 500 records), in a task process that may arm a run's faults."""
    from onceflow.core import faults

    produce(one_kafka_broker, pipeline.spec.topics[0], 500, seed=7)
    monkeypatch.setenv(faults.RUN_PARAM_GUARD, faults.RUN_PARAM_GUARD_VALUE)
    return shipped_code(pipeline.spec), plan_next(pipeline)


def test_a_runs_faults_never_reach_the_python_workers_of_a_server_that_does_not_allow_them(
        spark_connect_server, pipeline, planned):
    # The server's workers cannot inherit the task's ONCEFLOW_FAULTS (spark-submit's workers do): the
    # run's faults reach them as a writer option, armed only on a server that enables injection.
    from onceflow.core import faults

    code, plan = planned
    with pytest.raises(Exception, match=faults.RUN_PARAM_GUARD):  # the session's server does not enable it
        with faults.armed_for_job(WORKER_POINT):
            run_connect_batch(spark_connect_server.url, pipeline, plan.batch_seq, code)
    assert run_connect_batch(spark_connect_server.url, pipeline, plan.batch_seq, code).attempt == 2
    assert commit(pipeline, plan) == "committed"


@pytest.mark.slow  # a server of its own; make test's bounded Spark Connect chaos run arms its server's workers too
def test_a_runs_faults_reach_the_python_workers_of_a_server_that_allows_them(pipeline, planned, tmp_path):
    from onceflow.core import faults

    code, plan = planned
    fired_log = tmp_path / "fired.log"
    proc = ManagedProcess("spark-connect-injecting", tmp_path / "spark-connect").reset()
    try:
        server = start_connect_server(proc, env={faults.RUN_PARAM_GUARD: faults.RUN_PARAM_GUARD_VALUE,
                                                 faults.FIRED_LOG_VAR: str(fired_log)}, die_with_parent=True)
        with pytest.raises(Exception, match="kafka.precommit.after_flush"):
            with faults.armed_for_job(WORKER_POINT):
                run_connect_batch(server.url, pipeline, plan.batch_seq, code)
        fired = [line.split() for line in fired_log.read_text().splitlines()]
        assert fired and all(point == "kafka.precommit.after_flush" for point, _, _ in fired), fired
        assert all(int(pid) != os.getpid() for _, _, pid in fired)  # in the server's workers, not the client
        result = run_connect_batch(server.url, pipeline, plan.batch_seq, code)  # the next attempt, unarmed
    finally:
        proc.stop(grace=2)
    assert result.attempt == 2
    assert commit(pipeline, plan) == "committed"
    report = audit_clickstream(pipeline)
    assert report.ok, report.summary()
    assert report.input_records == 500
