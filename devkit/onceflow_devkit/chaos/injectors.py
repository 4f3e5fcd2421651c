"""Inject one batch's fault while its DAG run is under way (chaos harness process).

``inject(fault, target)`` runs in a thread next to the run and returns an
``Injection`` saying whether the fault really happened, and when: a process
that had already exited cannot be killed, a commit that finished before the
fence cannot be fenced. Only injections that happened count as faults in the
figures; the others are reported as missed.

Processes are found among the Airflow home's own processes (its components
and everything they forked, orphans included) and, in Spark Connect mode, the
run's own server and its Python workers, never by name machine-wide: other
Airflows and Spark jobs may run on the same machine.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from onceflow.core import faults
from onceflow_devkit.chaos import schedule

_POLL_S = 0.1
# Task processes carry the title "airflow worker -- <task instance id>"; the
# executor's own workers are "airflow worker -- LocalExecutor ...".
_TASK_TITLE = re.compile(r"^airflow worker -- ([0-9a-f]{8}-[0-9a-f-]{27})$")


@dataclass
class Injection:
    kind: str
    injected: bool
    what: str
    at_s: float | None = None  # seconds after the run was triggered
    counts: dict[str, int] = field(default_factory=dict)  # per sub-kind (S3 faults, fault points)
    records_added: int = 0  # input records the fault produced (the audit must find them too)


@dataclass
class RunTarget:
    """What an injector may touch during one DAG run."""

    api: Any                  # local_airflow.rest.AirflowApi
    dag_id: str
    run_id: str
    airflow: Any              # local_airflow.LocalAirflow
    stack: Any                # services.stack.EmbeddedStack
    runtime: Any              # runtime.PipelineRuntime (harness view: direct S3, no proxy)
    proxy: Any | None         # s3_proxy.S3FaultProxy in front of the warehouse's S3, if any
    fired_log: Path           # faults.FIRED_LOG_VAR of the Airflow processes (and the Connect server)
    run_finished: threading.Event
    started: float = field(default_factory=time.monotonic)
    spark_server: Any | None = None  # services.spark_connect.RestartableConnectServer in Spark Connect mode
    table_server: Any | None = None  # services.postgres.RestartablePostgres of the table output (--postgres)
    catalog: Any | None = None  # services.rest_catalog.RestCatalog of the Iceberg outputs (a file warehouse)
    task_of: dict[str, str | None] = field(default_factory=dict)  # task instance id -> task id
    conf: dict[str, Any] = field(default_factory=dict)  # the run's conf
    vote_age_guard_s: float = 0.0  # how old a Kafka vote may be at commit (half the sinks' transaction timeout)
    n: int = 0  # the run's number in the chaos run
    zombies: Any | None = None  # zombies.ZombiePen of the chaos run: frozen spark tasks of earlier batches

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 2)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; False when the run finished meanwhile."""
        return not self.run_finished.wait(seconds)


def _cmdline(proc: psutil.Process) -> str:
    try:
        # setproctitle leaves the old argv slots as empty strings
        return " ".join(part for part in proc.cmdline() if part)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def _airflow_processes(target: RunTarget) -> list[psutil.Process]:
    procs = []
    for pid in target.airflow.processes():
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return procs


def _spark_server_processes(target: RunTarget) -> list[psutil.Process]:
    """The Spark Connect server's JVM and everything it started (its Python workers)."""
    pid = target.spark_server.process.running_pid() if target.spark_server else None
    if pid is None:
        return []
    try:
        server = psutil.Process(pid)
        return [server, *server.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _is_spark_submit(cmd: str) -> bool:
    return "java" in cmd.split(" ", 1)[0] and "org.apache.spark.deploy.SparkSubmit" in cmd


def _is_python_worker(cmd: str) -> bool:
    # pyspark.daemon and the workers it forks, and the data source workers
    # (pyspark.sql.worker.*) that Spark starts for plan/write/commit.
    return "pyspark" in cmd and "java" not in cmd.split(" ", 1)[0] and "SparkSubmit" not in cmd


def _is_task_worker_daemon(cmd: str) -> bool:
    # The daemon that forks the Python workers of Spark tasks; each planner module (pyspark.sql.worker.*)
    # has a daemon of its own, on the driver's side.
    return cmd.split()[-2:] == ["pyspark.daemon", "pyspark.worker"]


def _run_task_processes(target: RunTarget) -> list[tuple[psutil.Process, str]]:
    """The live task processes of the run, with their task ids (each try has a task instance id of its own)."""
    procs = []
    for proc in _airflow_processes(target):
        match = _TASK_TITLE.match(_cmdline(proc))
        if not match:
            continue
        ti_id = match.group(1)
        if ti_id not in target.task_of:  # a new try has a new id: ask the API once per id
            target.task_of.update({ti["id"]: ti["task_id"] for ti in target.api.task_instances(target.dag_id, target.run_id)})
            target.task_of.setdefault(ti_id, None)  # another run's: not asked about again
        if target.task_of.get(ti_id) is not None:
            procs.append((proc, target.task_of[ti_id]))
    return procs


def _task_process(target: RunTarget, task_id: str) -> psutil.Process | None:
    return next((proc for proc, task in _run_task_processes(target) if task == task_id), None)


def _wait_for(target: RunTarget, find: Callable[[], Any]) -> Any:
    while not target.run_finished.is_set():
        found = find()
        if found:
            return found
        time.sleep(_POLL_S)
    return None


def _sigkill(proc: psutil.Process) -> bool:
    try:
        proc.send_signal(signal.SIGKILL)
        return True
    except psutil.NoSuchProcess:
        return False


def _kill_first(target: RunTarget, kind: str, what: str, find: Callable[[], psutil.Process | None], after_s: float) -> Injection:
    proc = _wait_for(target, find)
    if proc is None:
        return Injection(kind, False, f"no {what} appeared before the run ended")
    if not target.wait(after_s):
        return Injection(kind, False, f"the run ended within {after_s} s of the {what} starting")
    victim = find() or proc  # Python workers come and go: take one alive now
    if not victim.is_running() or not _sigkill(victim):
        return Injection(kind, False, f"the {what} exited before the kill ({after_s} s after it started)")
    return Injection(kind, True, f"SIGKILL {what} pid {victim.pid} {after_s} s after it started", target.elapsed())


def _find(target: RunTarget, predicate: Callable[[str], bool]) -> Callable[[], psutil.Process | None]:
    def find() -> psutil.Process | None:
        zombies = target.zombies.pids() if target.zombies is not None else set()  # earlier batches' frozen tasks
        alive = [p for p in _airflow_processes(target) + _spark_server_processes(target)
                 if p.pid not in zombies and predicate(_cmdline(p))]
        return alive[-1] if alive else None

    return find


def _spark_task_started(target: RunTarget, kind: str, after_s: float) -> Injection | None:
    """Wait for the spark task's process (a Spark Connect client), then ``after_s``: None when
    that moment came while the run was still going, else the Injection saying why it never did."""
    if _wait_for(target, lambda: _task_process(target, "spark")) is None:
        return Injection(kind, False, "the spark task never ran")
    if not target.wait(after_s):
        return Injection(kind, False, f"the run ended within {after_s} s of the spark task starting")
    return None


def _kill_server_python_worker(target: RunTarget, fault: schedule.Fault) -> Injection:
    # A Connect server's Python workers outlive jobs (idle daemons): the kill is timed from the
    # spark task's start, so it meets the job's workers rather than yesterday's.
    missed = _spark_task_started(target, fault.kind, fault.detail["after_s"])
    if missed:
        return missed
    victim = _find(target, _is_python_worker)()
    if victim is None or not _sigkill(victim):
        return Injection(fault.kind, False, "no Python worker of the Spark Connect server was alive")
    return Injection(fault.kind, True, f"SIGKILL Spark Connect Python worker pid {victim.pid} "
                     f"{fault.detail['after_s']} s after the spark task started", target.elapsed())


def _restart_connect_server(target: RunTarget, fault: schedule.Fault) -> Injection:
    if target.spark_server is None:
        return Injection(fault.kind, False, "not in Spark Connect mode")
    missed = _spark_task_started(target, fault.kind, fault.detail["after_s"])
    if missed:
        return missed
    at = target.elapsed()
    if not target.spark_server.crash_and_restart():
        return Injection(fault.kind, False, "the Spark Connect server was not running (started again)", at)
    return Injection(fault.kind, True, f"Spark Connect server SIGKILLed (with its Python workers) {fault.detail['after_s']} s "
                     f"after the spark task started, and started again ({target.elapsed() - at:.0f} s)", at)


def _restart_broker(target: RunTarget, fault: schedule.Fault) -> Injection:
    if not target.wait(fault.detail["after_s"]):
        return Injection(fault.kind, False, "the run ended before the restart moment")
    broker = target.runtime.deployment.kafka
    # noida loses acknowledged data on SIGKILL (CAPABILITIES: SURVIVES_SIGKILL);
    # a broker that survives SIGKILL gets the harder restart.
    from onceflow_devkit.services.kafka_broker import SURVIVES_SIGKILL

    kill = SURVIVES_SIGKILL in broker.capabilities
    at = target.elapsed()
    target.stack.restart_broker(kill=kill)
    return Injection(fault.kind, True, f"broker restarted ({'SIGKILL' if kill else 'SIGTERM'}) {at} s into the run", at)


def _unreachable_broker(target: RunTarget, fault: schedule.Fault) -> Injection:
    commit = _wait_for(target, lambda: _task_process(target, "commit"))
    if commit is None:
        return Injection(fault.kind, False, "the commit task never ran")
    pids = target.stack.kafka_pids()  # a cluster's every node: the whole cluster stops answering
    if not pids:
        return Injection(fault.kind, False, "no broker process to stop")
    at = target.elapsed()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(fault.detail["hold_s"])
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    return Injection(fault.kind, True, f"broker stopped answering (SIGSTOP) for {fault.detail['hold_s']} s while commit ran", at)


def _kafka_ids(status, sinks_done=()) -> list[str]:
    """The transactional ids the batch's Kafka outputs may use (its plan's: each batch has ids of
    its own), but those of ``sinks_done``."""
    return [txn_id for sink in status.plan.sinks if sink.kind == "kafka" and sink.name not in sinks_done
            for txn_id in sink.transactional_ids]


def _decided_not_applied(target: RunTarget):
    """The run's batch once it has a COMMIT decision and nothing of it is applied yet, else None."""
    from onceflow.core.ledger.records import DecisionOutcome

    status = _this_runs_batch(target)
    if status is None or status.decision is None:
        return None
    return status if status.decision.outcome is DecisionOutcome.COMMIT and not status.done else None


def _abort_after_commit_decision(target: RunTarget, fault: schedule.Fault) -> Injection:
    """The run's commit task crashes right after writing COMMIT (its faults param); before its retry,
    abort the batch's open transactions at the broker, as a transaction timeout would."""
    from onceflow.sinks.kafka.fencing import fence_transactional_ids

    coordinator = target.runtime.coordinator
    status = _wait_for(target, lambda: _decided_not_applied(target))
    if status is None:
        return Injection(fault.kind, False, "no batch of this run was left with a COMMIT decision and nothing applied")
    ids = _kafka_ids(status, sinks_done=coordinator.describe(status.batch_seq).done)
    at = target.elapsed()
    fence_transactional_ids(target.runtime.deployment.kafka.config(), ids)
    kafka = {s.name for s in status.plan.sinks if s.kind == "kafka"}
    applied = kafka & set(coordinator.describe(status.batch_seq).done)
    if not ids or applied:  # the commit's retry got there first: nothing of it was aborted
        return Injection(fault.kind, False, f"the commit applied {sorted(applied)} before the abort at the broker", at)
    return Injection(fault.kind, True, f"aborted {len(ids)} transactions of batch {status.batch_id} at the broker "
                     "after its COMMIT decision, before the commit applied it (the commit must repair them)", at)


def _lose_worker(target: RunTarget, fault: schedule.Fault) -> Injection:
    """SIGKILL, at once, every task process of the run and everything they started (spark-submit's
    JVM and Python workers, a Spark Connect client): the machine running them is gone."""
    if not target.wait(fault.detail["after_s"]):
        return Injection(fault.kind, False, "the run ended before the moment of the loss")
    tasks = _run_task_processes(target)
    if not tasks:
        return Injection(fault.kind, False, f"no task process of the run was alive {fault.detail['after_s']} s in")
    victims = []
    for proc, _ in tasks:
        try:
            victims += [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    killed = [p for p in victims if _sigkill(p)]
    return Injection(fault.kind, bool(killed), f"SIGKILL {len(killed)} processes at once (the task processes of "
                     f"{', '.join(sorted({task for _, task in tasks}))} and all they started) "
                     f"{fault.detail['after_s']} s into the run", target.elapsed())


def _add_partition(target: RunTarget, fault: schedule.Fault) -> Injection:
    """One more partition of the input topic, and records in it, while the run runs: planning must
    read the new partition from its first record (whatever the start position)."""
    from confluent_kafka.admin import AdminClient, NewPartitions
    from onceflow_examples.clickstream_data import NotDelivered, generate, produce

    if not target.wait(fault.detail["after_s"]):
        return Injection(fault.kind, False, "the run ended before the partition could be added")
    config = target.runtime.deployment.kafka.config()
    topic = target.runtime.spec.topics[0]
    admin = AdminClient(dict(config))
    partitions = len(admin.list_topics(topic, timeout=30).topics[topic].partitions)
    at = target.elapsed()
    admin.create_partitions([NewPartitions(topic, partitions + 1)])[topic].result(30)
    records = generate(fault.detail["records"], seed=-1000 - partitions, malformed_ratio=0.1)
    try:
        produced = produce(config, topic, records, partition=partitions)
    except NotDelivered as refused:  # e.g. the producer did not know the new partition yet: count what is there
        return Injection(fault.kind, True, f"partition {partitions} added to {topic}; {refused}", at,
                         records_added=refused.delivered)
    return Injection(fault.kind, True, f"partition {partitions} added to {topic} with {produced} records", at,
                     records_added=produced)


def oversized_outcome(coordinator, fault: schedule.Fault, partition: int, offset: int) -> Injection:
    """After the drain: which committed batch read the oversized input record the runner placed at
    ``offset`` of ``partition``, and did it withhold its enriched record? (Aborts and replays shift
    which run reads which offsets, so this is only known at the end.)"""
    from onceflow_devkit.audit.clickstream_audit import committed_plans

    for plan, status in committed_plans(coordinator):
        if any(r.partition == partition and r.start <= offset < r.end for r in plan.ranges):
            withheld = sum(vote.withheld for vote in status.decision.votes.values())
            return Injection(fault.kind, withheld > 0, f"the oversized record at partition {partition} offset {offset} was "
                             f"in batch {plan.batch_id}, which withheld {withheld} record(s) too large for Kafka")
    return Injection(fault.kind, False, f"no committed batch read partition {partition} offset {offset}")


def _fence_open_transactions(target: RunTarget, fault: schedule.Fault) -> Injection:
    from onceflow.sinks.kafka.fencing import fence_transactional_ids

    coordinator = target.runtime.coordinator

    def voted_undecided():
        status = coordinator.describe()
        if status is None or status.plan.run_id != target.run_id:
            return None
        if status.attempt and not status.missing_votes and status.decision is None:
            return status
        return None

    status = _wait_for(target, voted_undecided)
    if status is None:
        return Injection(fault.kind, False, "no batch of this run had every vote and no decision")
    ids = _kafka_ids(status)
    at = target.elapsed()
    config = target.runtime.deployment.kafka.config()
    # All at once: the window between the last vote and the decision is about a second, and on the
    # 3-node cluster fencing 4 ids one after another outlasted it in most tries (each waits for its markers).
    with ThreadPoolExecutor(len(ids) or 1) as pool:
        list(pool.map(lambda txn_id: fence_transactional_ids(config, [txn_id]), ids))
    decision = target.runtime.coordinator.ledger.read_decision(status.batch_seq)
    if decision is not None:
        return Injection(fault.kind, False, f"the commit decided while {len(ids)} ids were being fenced", at)
    return Injection(fault.kind, True, f"fenced {len(ids)} transactional ids of batch {status.batch_id} after its votes, before the decision", at)


def _second_run(target: RunTarget, fault: schedule.Fault) -> Injection:
    """A second run of the DAG alongside this one, outside the scheduler (``airflow dags test``), with
    the same conf but no faults: the two runs race for the next batch and the audit counts both."""
    if not target.wait(fault.detail["after_s"]):
        return Injection(fault.kind, False, "the run ended before the second run could start")
    at = target.elapsed()
    second = target.airflow.dags_test(target.dag_id, conf={k: v for k, v in target.conf.items() if k != faults.RUN_PARAM})
    return Injection(fault.kind, True, f"a second run ({second.run_id}, airflow dags test) started {at} s into this one "
                     f"and ended {second.run_state} {second.seconds:.0f} s later", at)


def _delay_commit(target: RunTarget, fault: schedule.Fault) -> Injection:
    """Hold the commit task (SIGSTOP) from its start until the batch's Kafka votes are older than their
    age guard: the commit must refuse them (the broker may have ended those transactions) and abort."""
    commit = _wait_for(target, lambda: _task_process(target, "commit"))
    if commit is None:
        return Injection(fault.kind, False, "the commit task never ran")
    try:
        commit.suspend()
    except psutil.NoSuchProcess:
        return Injection(fault.kind, False, "the commit task exited before it could be held")
    at = target.elapsed()
    status = target.runtime.coordinator.describe()
    decided = status is not None and status.decision is not None
    hold = target.vote_age_guard_s + fault.detail["past_guard_s"]
    try:
        time.sleep(hold)
    finally:
        try:
            commit.resume()
        except psutil.NoSuchProcess:
            pass
    if decided:
        return Injection(fault.kind, False, f"batch {status.batch_id} was decided before the commit task was held", at)
    return Injection(fault.kind, True, f"commit task held {hold:.0f} s (SIGSTOP), {fault.detail['past_guard_s']} s past the "
                     f"Kafka votes' age guard ({target.vote_age_guard_s:.0f} s)", at)


def _kill_node_for_a_while(target: RunTarget, fault: schedule.Fault, node: int, what: str) -> Injection:
    """SIGKILL cluster node ``node`` (an index), keep it down ``down_s``, start it again."""
    cluster = target.stack.cluster()
    if node not in cluster.running():
        return Injection(fault.kind, False, f"{what} (node {node + 1}) was already down")
    at = target.elapsed()
    cluster.kill(node)
    time.sleep(fault.detail["down_s"])
    cluster.start(node)
    return Injection(fault.kind, True, f"{what} (node {node + 1}) SIGKILLed {at} s into the run, started again "
                     f"{fault.detail['down_s']} s later", at)


def _kill_node(target: RunTarget, fault: schedule.Fault) -> Injection:
    if not target.wait(fault.detail["after_s"]):
        return Injection(fault.kind, False, "the run ended before the kill")
    return _kill_node_for_a_while(target, fault, fault.detail["node"] - 1, "a Kafka node")


def _kill_controller(target: RunTarget, fault: schedule.Fault) -> Injection:
    if not target.wait(fault.detail["after_s"]):
        return Injection(fault.kind, False, "the run ended before the kill")
    return _kill_node_for_a_while(target, fault, target.stack.cluster().active_controller(), "the active KRaft controller")


def _this_runs_batch(target: RunTarget):
    status = target.runtime.coordinator.describe()
    return status if status is not None and status.plan.run_id == target.run_id else None


def _kill_coordinator(target: RunTarget, fault: schedule.Fault) -> Injection:
    """SIGKILL the node that coordinates the batch's first Kafka split, ``after_s`` into the commit task."""
    from onceflow.sinks.kafka.coordinators import describe_transactions

    if _wait_for(target, lambda: _task_process(target, "commit")) is None:
        return Injection(fault.kind, False, "the commit task never ran")
    status = _this_runs_batch(target)
    ids = _kafka_ids(status) if status is not None else []
    if not ids or not target.wait(fault.detail["after_s"]):
        return Injection(fault.kind, False, "the run ended, or its batch has no Kafka transactions, before the kill")
    view = describe_transactions(target.runtime.deployment.kafka.config(), ids[:1], timeout_s=5).get(ids[0])
    if view is None:
        return Injection(fault.kind, False, f"no coordinator answered for {ids[0]}")
    return _kill_node_for_a_while(target, fault, view.coordinator - 1, f"the coordinator of {ids[0]}")


def _await_broker_aborts(target: RunTarget, ids: list[str], timeout_s: float) -> bool:
    """Poll the coordinators until none of ``ids`` has a transaction open (the broker timed them out)."""
    from onceflow.sinks.kafka.coordinators import describe_transactions, TransactionState

    deadline = time.monotonic() + timeout_s
    config = target.runtime.deployment.kafka.config()
    while time.monotonic() < deadline:
        views = describe_transactions(config, ids, timeout_s=5)
        if len(views) == len(set(ids)) and not any(v.state is TransactionState.ONGOING for v in views.values()):
            return True
        time.sleep(1)
    return False


def _hold_until_timed_out(target: RunTarget, commit: psutil.Process, ids: list[str]) -> tuple[bool, float]:
    """Hold ``commit`` (SIGSTOP) until the broker has aborted every transaction of ``ids``; (did it, seconds held)."""
    started = time.monotonic()
    try:
        commit.suspend()
    except psutil.NoSuchProcess:
        return False, 0.0
    try:
        aborted = _await_broker_aborts(target, ids, timeout_s=4 * target.vote_age_guard_s + 60)
    finally:
        try:
            commit.resume()
        except psutil.NoSuchProcess:
            pass
    return aborted, time.monotonic() - started


def _timeout_before_decision(target: RunTarget, fault: schedule.Fault) -> Injection:
    """Hold the commit task from its start until the broker has timed the batch's transactions out."""
    commit = _wait_for(target, lambda: _task_process(target, "commit"))
    status = _this_runs_batch(target)
    if commit is None or status is None:
        return Injection(fault.kind, False, "the commit task never ran")
    if status.decision is not None:
        return Injection(fault.kind, False, f"batch {status.batch_id} was decided before the commit task was held")
    at = target.elapsed()
    aborted, held = _hold_until_timed_out(target, commit, _kafka_ids(status))
    return Injection(fault.kind, aborted, f"commit task held {held:.0f} s (SIGSTOP) until the broker had timed out "
                     f"{'every' if aborted else 'NOT every'} transaction of batch {status.batch_id}, before the decision", at)


def _timeout_after_decision(target: RunTarget, fault: schedule.Fault) -> Injection:
    """The commit task crashes right after writing COMMIT (its faults param); its retry is held until the
    broker has timed the batch's transactions out: the retry must repair them from the staged copies."""
    status = _wait_for(target, lambda: _decided_not_applied(target))
    if status is None:
        return Injection(fault.kind, False, "no batch of this run was left with a COMMIT decision and nothing applied")
    crashed = {p.pid for p in [_task_process(target, "commit")] if p is not None}
    retry = _wait_for(target, lambda: next((p for p, task in _run_task_processes(target)
                                            if task == "commit" and p.pid not in crashed), None))
    if retry is None:
        return Injection(fault.kind, False, "the commit task was not retried before the run ended")
    at = target.elapsed()
    aborted, held = _hold_until_timed_out(target, retry, _kafka_ids(status))
    kafka = {s.name for s in status.plan.sinks if s.kind == "kafka"}
    applied = kafka & set(target.runtime.coordinator.describe(status.batch_seq).done)
    if applied or not aborted:
        return Injection(fault.kind, False, f"the retry applied {sorted(applied)} first, or the broker did not time out "
                         f"every transaction in {held:.0f} s", at)
    return Injection(fault.kind, True, f"the commit's retry held {held:.0f} s (SIGSTOP) until the broker had timed out "
                     f"the transactions of batch {status.batch_id} after its COMMIT decision (the retry must repair them)", at)


def _table_sinks(target: RunTarget) -> list:
    return [sink for sink in target.runtime.spec.sinks if sink.kind == "postgres"]


def _tables_done(target: RunTarget) -> bool:
    """Every table output of the run's batch is committed (its done record written)."""
    status = _this_runs_batch(target)
    return status is not None and all(sink.name in status.done for sink in _table_sinks(target))


def _crash_table_server(target: RunTarget, fault: schedule.Fault) -> Injection:
    """The table's PostgreSQL crashes ``after_s`` into the commit task, before the table's commit is
    done (else the crash is missed: it met no commit), and is down ``down_s``."""
    from onceflow_devkit.services.process import ServiceError

    if _wait_for(target, lambda: _task_process(target, "commit")) is None:
        return Injection(fault.kind, False, "the commit task never ran")
    if not target.wait(fault.detail["after_s"]):
        return Injection(fault.kind, False, f"the run ended within {fault.detail['after_s']} s of the commit task starting")
    if _tables_done(target):
        return Injection(fault.kind, False, f"the table's commit was done {fault.detail['after_s']} s into the commit task")
    at = target.elapsed()
    if not target.table_server.crash():
        return Injection(fault.kind, False, "the table's PostgreSQL was not running", at)
    if _tables_done(target):  # done between the look and the kill: the crash may have come after it
        return Injection(fault.kind, False, "the table's commit was done as its server went down", at)
    what = (f"the table's PostgreSQL crashed (every process SIGKILLed) {fault.detail['after_s']} s into the commit task, "
            "before the table's commit was done")
    time.sleep(fault.detail["down_s"])
    try:
        target.table_server.start()
    except ServiceError as exc:  # the runner starts it again after the run
        return Injection(fault.kind, True, f"{what}; starting it again failed: {exc}", at)
    return Injection(fault.kind, True, f"{what}, started again {fault.detail['down_s']} s later", at)


def _iceberg_done(target: RunTarget) -> bool:
    """Every Iceberg output of the run's batch is committed (its done record written)."""
    status = _this_runs_batch(target)
    return status is not None and all(sink.name in status.done for sink in target.runtime.spec.sinks
                                      if sink.kind == "iceberg")


def _kill_catalog(target: RunTarget, fault: schedule.Fault) -> Injection:
    """The Iceberg REST catalog SIGKILLed ``after_s`` into the commit task, before the table's commit
    is done (else the kill met no commit), and started again on its port ``down_s`` later."""
    from onceflow_devkit.services.process import ServiceError

    if _wait_for(target, lambda: _task_process(target, "commit")) is None:
        return Injection(fault.kind, False, "the commit task never ran")
    if not target.wait(fault.detail["after_s"]):
        return Injection(fault.kind, False, f"the run ended within {fault.detail['after_s']} s of the commit task starting")
    if _iceberg_done(target):
        return Injection(fault.kind, False, f"the table's commit was done {fault.detail['after_s']} s into the commit task")
    at = target.elapsed()
    if not target.catalog.proc.kill():
        return Injection(fault.kind, False, "the REST catalog was not running", at)
    if _iceberg_done(target):  # done between the look and the kill: the kill may have come after it
        return Injection(fault.kind, False, "the table's commit was done as its catalog went down", at)
    what = f"the REST catalog SIGKILLed {fault.detail['after_s']} s into the commit task, before the table's commit was done"
    time.sleep(fault.detail["down_s"])
    try:
        target.catalog.restart()
    except ServiceError as exc:  # the runner starts it again after the run
        return Injection(fault.kind, True, f"{what}; starting it again failed: {exc}", at)
    return Injection(fault.kind, True, f"{what}, started again on its port {fault.detail['down_s']} s later", at)


def _table_prepared(target: RunTarget) -> bool:
    """A transaction of the run's batch is PREPAREd on the table's server."""
    from onceflow_postgres_sink import ids
    from onceflow_postgres_sink.tables import prepared

    status = _this_runs_batch(target)
    if status is None:
        return False
    with target.table_server.server.connect(autocommit=True, connect_timeout=5) as conn:
        return any(prepared(conn, ids.batch_prefix(target.runtime.spec.name, sink.name, status.plan.batch_seq))
                   for sink in _table_sinks(target))


def terminate_other_clients(conn) -> set[int]:
    """Terminate every client connection to ``conn``'s server but ``conn``; the backends terminated.
    The call sits in the select list, which only the rows the WHERE kept reach: in the WHERE clause,
    PostgreSQL may call it before it has compared the pid with our own (a run terminated itself so)."""
    return {pid for pid, terminated in conn.execute(
        "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()") if terminated}


def _kill_table_connections(target: RunTarget, fault: schedule.Fault) -> Injection:
    """Terminate every other connection to the table's server in a tight loop for ``for_s``, from the
    batch's first PREPARE on (``at`` prepare: a split still writing or preparing loses its transaction,
    or the answer whether it was prepared) or from the commit task's start (``at`` commit: the commit's
    connections). A commit's connection lives milliseconds: a pause between rounds would let it through.
    Counted by backend: a terminated one stays listed until it has exited."""
    if fault.detail["at"] == "prepare":
        began = _wait_for(target, lambda: _table_prepared(target))
    else:
        began = _wait_for(target, lambda: _task_process(target, "commit"))
    if began is None:
        return Injection(fault.kind, False, f"the run ended before its first {fault.detail['at']}")
    at = target.elapsed()
    killed: set[int] = set()
    deadline = time.monotonic() + fault.detail["for_s"]
    with target.table_server.server.connect(autocommit=True, connect_timeout=5) as conn:
        while time.monotonic() < deadline:
            killed |= terminate_other_clients(conn)
    when = "the batch's first PREPARE" if fault.detail["at"] == "prepare" else "the commit task's start"
    if not killed:
        return Injection(fault.kind, False, f"no connection to the table's server was open in the {fault.detail['for_s']} s "
                         f"after {when}", at)
    return Injection(fault.kind, True, f"{len(killed)} connection(s) to the table's server terminated in the "
                     f"{fault.detail['for_s']} s after {when}", at, counts={"connections_terminated": len(killed)})


def _s3_faults(target: RunTarget, fault: schedule.Fault) -> Injection:
    from onceflow_devkit.chaos.s3_proxy import S3_FAULT_KINDS, S3FaultRates

    if target.proxy is None:
        return Injection(fault.kind, False, "no S3 warehouse behind a fault proxy")
    share = fault.detail["error_share"]
    before = target.proxy.counts()
    target.proxy.rates = S3FaultRates(**{kind: share / len(S3_FAULT_KINDS) for kind in S3_FAULT_KINDS})
    try:
        target.run_finished.wait()
    finally:
        target.proxy.rates = S3FaultRates()
    after = target.proxy.counts()
    counts = {k: after.get(k, 0) - before.get(k, 0) for k in S3_FAULT_KINDS}
    requests = after.get("requests", 0) - before.get("requests", 0)
    injected = sum(counts.values())
    return Injection(fault.kind, injected > 0, f"{injected} of {requests} S3 requests failed or slowed", 0.0, counts)


def _fired_points(target: RunTarget, fault: schedule.Fault) -> Injection:
    offset = target.fired_log.stat().st_size if target.fired_log.exists() else 0
    target.run_finished.wait()
    with open(target.fired_log, "a+") as log:
        log.seek(offset)
        fired = [line.split() for line in log.read().splitlines() if line.strip()]
    asked = fault.run_param
    if not fired:
        return Injection(fault.kind, False, f"{asked}: no armed point was reached")
    counts: dict[str, int] = {}
    for point, action, _pid in fired:
        counts[f"{point}={action}"] = counts.get(f"{point}={action}", 0) + 1
    return Injection(fault.kind, True, f"{asked}: fired {', '.join(counts)}", None, counts)


def _kill_spark_submit(target: RunTarget, fault: schedule.Fault) -> Injection:
    return _kill_first(target, fault.kind, "spark-submit JVM", _find(target, _is_spark_submit), fault.detail["after_s"])


def _kill_python_worker(target: RunTarget, fault: schedule.Fault) -> Injection:
    if target.spark_server is not None:
        return _kill_server_python_worker(target, fault)
    return _kill_first(target, fault.kind, "Spark Python worker", _find(target, _is_python_worker), fault.detail["after_s"])


def _kill_task_process(target: RunTarget, fault: schedule.Fault) -> Injection:
    task = fault.detail["task"]
    return _kill_first(target, fault.kind, f"Airflow task process of {task!r}", lambda: _task_process(target, task),
                       fault.detail["after_s"])


def _kill_connect_client(target: RunTarget, fault: schedule.Fault) -> Injection:
    return _kill_first(target, fault.kind, "Spark Connect client (the spark task's process)",
                       lambda: _task_process(target, "spark"), fault.detail["after_s"])


def _fired_since(target: RunTarget, offset: int, spec: str) -> int | None:
    """The pid of the first process that fired ``spec`` ("point=action") in the fired log after ``offset``."""
    if not target.fired_log.exists():
        return None
    with open(target.fired_log) as log:
        log.seek(offset)
        fired = [line.split() for line in log.read().splitlines() if line.strip()]
    return next((int(pid) for point, action, pid in fired if f"{point}={action}" == spec), None)


def _freeze_zombie(target: RunTarget, fault: schedule.Fault) -> Injection:
    """While the spark-submit driver is held before the batch's first Kafka output (the run's faults
    param), stop (SIGSTOP) the daemon of the job's task workers and its idle workers: the output's tasks
    then wait in them, before any writer opened its transaction. Then SIGKILL the spark task's Airflow process alone:
    the task fails (its retry, or a later run, finishes the batch) while the job runs on, orphaned, its
    Kafka tasks frozen. The zombie pen lets them go once the batch holding the same pooled ids pre-committed;
    whether it met that batch is known only then (``zombies.outcome``)."""
    offset = target.fired_log.stat().st_size if target.fired_log.exists() else 0
    point = fault.run_param.split("@", 1)[0]
    driver_pid = _wait_for(target, lambda: _fired_since(target, offset, point))
    status = _this_runs_batch(target)
    if driver_pid is None or status is None:
        return Injection(fault.kind, False, "the job was never held before its first Kafka output")
    try:
        job = psutil.Process(driver_pid).parent()
        daemons = [p for p in job.children() if _is_task_worker_daemon(_cmdline(p))] if _is_spark_submit(_cmdline(job)) else []
    except psutil.NoSuchProcess:
        daemons = []
    if not daemons:
        return Injection(fault.kind, False, "the held driver's spark-submit JVM had no daemon of task workers")
    at = target.elapsed()
    signal_each(daemons, signal.SIGSTOP)  # the daemon first: it forks no worker after
    frozen = [*daemons, *(worker for daemon in daemons for worker in daemon.children())]
    signal_each(frozen, signal.SIGSTOP)
    task = _task_process(target, "spark")
    if task is None or not _sigkill(task):
        signal_each(frozen, signal.SIGCONT)
        return Injection(fault.kind, False, "the spark task's process was gone before it could be failed", at)
    sink = target.runtime.spec.sinks[int(fault.run_param.rsplit("@", 1)[1])].name  # the output after the held gap
    zombie = target.zombies.hold(target.n, status.batch_seq, status.attempt, sink, job, frozen)
    return Injection(fault.kind, False, f"batch {status.batch_id}'s job (attempt {status.attempt}) frozen before "
                     f"{sink}: {len(frozen)} pyspark processes stopped, its spark task SIGKILLed; let go in batch "
                     f"{zombie.meets}, if it comes", at)


def signal_each(procs: list[psutil.Process], sig: int) -> None:
    """Send ``sig`` to each of ``procs`` still alive."""
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def _decided_after_the_drain(target: RunTarget, fault: schedule.Fault) -> Injection:
    # The runner placed the record among the input; oversized_outcome finds the batch that read it.
    return Injection(fault.kind, False, "decided after the drain")


# What injects each kind (blocks until done or the run ends).
INJECTORS: dict[str, Callable[[RunTarget, schedule.Fault], Injection]] = {
    schedule.POINT_CRASH: _fired_points,
    schedule.POINT_RAISE: _fired_points,
    schedule.KILL_SPARK_SUBMIT: _kill_spark_submit,
    schedule.KILL_PYTHON_WORKER: _kill_python_worker,
    schedule.KILL_TASK_PROCESS: _kill_task_process,
    schedule.LOSE_WORKER: _lose_worker,
    schedule.BROKER_RESTART: _restart_broker,
    schedule.BROKER_UNREACHABLE: _unreachable_broker,
    schedule.BROKER_FENCE: _fence_open_transactions,
    schedule.BROKER_ABORT_AFTER_COMMIT: _abort_after_commit_decision,
    schedule.S3_FAULTS: _s3_faults,
    schedule.KILL_CONNECT_CLIENT: _kill_connect_client,
    schedule.RESTART_CONNECT_SERVER: _restart_connect_server,
    schedule.PARTITION_ADDED: _add_partition,
    schedule.OVERSIZED_RECORD: _decided_after_the_drain,
    schedule.TWO_RUNS_AT_ONCE: _second_run,
    schedule.COMMIT_DELAYED: _delay_commit,
    schedule.NODE_KILLED: _kill_node,
    schedule.CONTROLLER_KILLED: _kill_controller,
    schedule.COORDINATOR_KILLED: _kill_coordinator,
    schedule.TIMEOUT_BEFORE_DECISION: _timeout_before_decision,
    schedule.TIMEOUT_AFTER_DECISION: _timeout_after_decision,
    schedule.POSTGRES_CRASHED: _crash_table_server,
    schedule.POSTGRES_CONNECTIONS_KILLED: _kill_table_connections,
    schedule.CATALOG_KILLED: _kill_catalog,
    schedule.FROZEN_ZOMBIE: _freeze_zombie,
}


def inject(fault: schedule.Fault, target: RunTarget) -> Injection:
    """Apply ``fault`` to the run ``target`` (blocks until done or the run ends)."""
    injector = INJECTORS.get(fault.kind)
    if injector is None:
        raise ValueError(f"unknown chaos fault kind {fault.kind!r}")
    return injector(target, fault)
