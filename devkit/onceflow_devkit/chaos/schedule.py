"""Which fault each batch of a chaos run gets: a pure function of the seed.

Kinds cycle in a freshly shuffled order (every ``len(kinds)`` batches each
kind comes up once), so a run of ``10 * len(kinds)`` batches asks for every
kind at least ten times; the details (which fault point, which task, how long
to wait) are drawn from the same seeded generator. Re-running with the same
seed and options asks for the same faults in the same order, with the same
version of this module: the kinds and ranges added on 2026-11-24 and
2026-11-25 changed the sequences of earlier seeds.

A frozen zombie (``FROZEN_ZOMBIE``, asked for by name only: ``OPT_IN_KINDS``)
spans runs: the first runs freeze one each (``zombie_runs``), and each is let
go ``TXN_ID_POOL`` batches later, in a batch that holds its pooled
transactional ids. The other runs draw the other kinds asked for as above, or
run without a fault (``NO_FAULT``) when there are none.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from onceflow.core import faults
from onceflow.core.plan import TXN_ID_POOL

POINT_CRASH = "point_crash"            # a named fault point ends its process (os._exit, like SIGKILL)
POINT_RAISE = "point_raise"            # a named fault point raises InjectedFault
KILL_SPARK_SUBMIT = "kill_spark_submit"    # SIGKILL of the spark-submit JVM (the driver)
KILL_PYTHON_WORKER = "kill_python_worker"  # SIGKILL of one of Spark's Python workers
KILL_TASK_PROCESS = "kill_task_process"    # SIGKILL of an Airflow task process (plan, spark or commit)
BROKER_RESTART = "broker_restart"      # the Kafka broker restarts at a random moment
BROKER_UNREACHABLE = "broker_unreachable"  # the broker stops answering (SIGSTOP) while commit runs
BROKER_FENCE = "broker_fence"          # the batch's open transactions aborted between pre-commit and commit
# The commit task crashes right after writing COMMIT, and the broker aborts the batch's transactions
# before its retry: the commit finds them aborted and repairs them from the staged copies.
BROKER_ABORT_AFTER_COMMIT = "broker_abort_after_commit"
LOSE_WORKER = "lose_worker"            # every task process of the run and all it started, SIGKILLed at once
PARTITION_ADDED = "partition_added"    # the input topic gets one more partition, with records, during the run
OVERSIZED_RECORD = "oversized_record"  # the batch's input holds an event whose enriched record is too large for Kafka
S3_FAULTS = "s3_faults"                # the S3 proxy fails a share of requests (5xx, SlowDown, resets, slow)
# Spark Connect mode (the spark task is a client of a long-running server):
KILL_CONNECT_CLIENT = "kill_connect_client"        # SIGKILL of the spark task's process while its job runs
RESTART_CONNECT_SERVER = "restart_connect_server"  # the server and its Python workers SIGKILLed, started again
# A second run of the same DAG at once (``airflow dags test``, as a second deployment or a
# hand-run test would start it; max_active_runs cannot stop that): one of them must lose cleanly.
TWO_RUNS_AT_ONCE = "two_runs_at_once"
COMMIT_DELAYED = "commit_delayed"      # the commit task held (SIGSTOP) until the Kafka votes are past their age guard
# A 3-node Apache Kafka cluster (--broker apache-cluster) only:
NODE_KILLED = "node_killed"            # one node SIGKILLed at a random moment, started again seconds later
CONTROLLER_KILLED = "controller_killed"  # the node leading the KRaft quorum SIGKILLed, started again
COORDINATOR_KILLED = "coordinator_killed"  # the node coordinating the batch's Kafka transactions SIGKILLed as the commit runs
# A broker that times transactions out (offsets mode: the hold is measured against the pipeline's timeout):
# the commit task held until the broker has aborted the batch's transactions, before the decision (the
# batch is aborted and replayed) or after it (its retry repairs them from the staged copies).
TIMEOUT_BEFORE_DECISION = "timeout_before_decision"
TIMEOUT_AFTER_DECISION = "timeout_after_decision"
# With a PostgreSQL table among the outputs (--postgres; the table has a server of its own):
POSTGRES_CRASHED = "postgres_crashed"  # the table's server crashes (every process SIGKILLed) as the commit runs, up again seconds later
# Every connection to the table's server terminated (pg_terminate_backend) again and again for a while,
# from the batch's first PREPARE (writers of other splits) or from the commit task's start (the commit's).
POSTGRES_CONNECTIONS_KILLED = "postgres_connections_killed"
# With the dev kit's Iceberg REST catalog (a file warehouse; an S3 one keeps the SQL catalog):
CATALOG_KILLED = "catalog_killed"  # the REST catalog SIGKILLed as the commit runs, started again on its port seconds later

PROCESS_KINDS = (KILL_SPARK_SUBMIT, KILL_PYTHON_WORKER, KILL_TASK_PROCESS, LOSE_WORKER)
BROKER_KINDS = (BROKER_RESTART, BROKER_UNREACHABLE, BROKER_FENCE, BROKER_ABORT_AFTER_COMMIT)
CONNECT_KINDS = (KILL_CONNECT_CLIENT, RESTART_CONNECT_SERVER)
INPUT_KINDS = (PARTITION_ADDED, OVERSIZED_RECORD)  # offsets mode: a backfill's input is stamped per hour
# Offsets mode only: interval batches run side by side by design, and the hourly DAG keeps the default timeout.
RUN_KINDS = (TWO_RUNS_AT_ONCE, COMMIT_DELAYED)
CLUSTER_KINDS = (NODE_KILLED, CONTROLLER_KILLED, COORDINATOR_KILLED)
TIMEOUT_KINDS = (TIMEOUT_BEFORE_DECISION, TIMEOUT_AFTER_DECISION)
POSTGRES_KINDS = (POSTGRES_CRASHED, POSTGRES_CONNECTIONS_KILLED)
ALL_KINDS = (POINT_CRASH, POINT_RAISE, *PROCESS_KINDS, *BROKER_KINDS, S3_FAULTS, *CONNECT_KINDS, *INPUT_KINDS, *RUN_KINDS,
             *CLUSTER_KINDS, *TIMEOUT_KINDS, *POSTGRES_KINDS, CATALOG_KILLED)
# A spark task of an older batch resumed while a later one runs: its Python workers frozen (SIGSTOP) before its
# Kafka writers open their transactions, the task failed without them, and the workers let go (SIGCONT) once
# the batch TXN_ID_POOL later, which holds the same pooled ids, has pre-committed. Opt-in (never a default
# kind): the sequences of earlier seeds and the bars of earlier runs stay as they were.
FROZEN_ZOMBIE = "frozen_zombie"
OPT_IN_KINDS = (FROZEN_ZOMBIE,)
KNOWN_KINDS = (*ALL_KINDS, *OPT_IN_KINDS)
# A run with no fault of its own: a batch later zombies may meet (not a kind; never counted as missed).
NO_FAULT = "no_fault"
ZOMBIES_AT_ONCE = 10  # frozen at once at most: 10 zombies fit in a run of about 30 batches
# The clickstream pipeline's first Kafka output is its third (files, Iceberg, then Kafka): its driver is held
# between outputs before the second gap's output, while its Python workers are frozen.
_HOLD_BEFORE_KAFKA = "job.between_outputs=hold@2"
# How the spark task runs its job: spark-submit (a driver JVM per batch) or Spark Connect.
SPARK_MODES = ("submit", "connect")

# Points on the abort path fire only when a batch is rolled back: the run
# that asks for one also fails its Spark job right after the attempt starts.
_FORCE_ROLLBACK = "job.after_attempt=raise"
_ANY_MAX_HITS = 12  # '*' fires at the n-th step reached; a run takes roughly 20-40


def opt_in_kinds_for(spark: str = "submit", mode: str = "offsets") -> tuple[str, ...]:
    """The opt-in kinds that can happen: a frozen zombie needs a Spark job whose Python workers are its own
    (spark-submit; a Spark Connect server's serve every batch) and the offsets pipeline."""
    return OPT_IN_KINDS if spark == "submit" and mode == "offsets" else ()


def kinds_for(warehouse_on_s3: bool, spark: str = "submit", mode: str = "offsets",
              adds_partitions: bool = True, cluster: bool = False, times_out: bool = False,
              postgres: bool = False, rest_catalog: bool = False) -> tuple[str, ...]:
    """The kinds that can happen: S3 faults need an S3 warehouse, a spark-submit JVM exists only
    in submit mode, a Spark Connect client and server only in connect mode; the input kinds
    change the input of an offsets pipeline only, and a partition is added only on a broker
    that can (``adds_partitions``). Nodes die only in a ``cluster``; a transaction times out
    only on a broker that ``times_out``, and is waited for in offsets mode only. The
    PostgreSQL kinds need a table among the outputs (``postgres``), the catalog's the REST catalog
    (``rest_catalog``)."""
    absent = {*(() if warehouse_on_s3 else (S3_FAULTS,)), *(CONNECT_KINDS if spark == "submit" else (KILL_SPARK_SUBMIT,)),
              *(() if mode == "offsets" else (*INPUT_KINDS, *RUN_KINDS, *TIMEOUT_KINDS)),
              *(() if adds_partitions else (PARTITION_ADDED,)), *(() if cluster else CLUSTER_KINDS),
              *(() if times_out else TIMEOUT_KINDS), *(() if postgres else POSTGRES_KINDS),
              *(() if rest_catalog else (CATALOG_KILLED,))}
    return tuple(k for k in ALL_KINDS if k not in absent)


@dataclass(frozen=True)
class Fault:
    """One batch's fault: its kind and the drawn details (what ``injectors`` needs)."""

    kind: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def run_param(self) -> str | None:
        """The DAG run's ``faults`` param, for fault-point kinds; None otherwise."""
        return self.detail.get("faults")

    def describe(self) -> str:
        return f"{self.kind}({', '.join(f'{k}={v}' for k, v in sorted(self.detail.items()))})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _point_fault(rng: random.Random, kind: str, points: Sequence[str]) -> Fault:
    action = "crash" if kind == POINT_CRASH else "raise"
    point = rng.choice([faults.ANY, *points])
    hits = rng.randint(1, _ANY_MAX_HITS) if point == faults.ANY else rng.randint(1, 2)
    spec = f"{point}={action}@{hits}"
    if point.startswith("abort."):
        spec = f"{_FORCE_ROLLBACK},{spec}"
    return Fault(kind, {"faults": spec})


# The protocol tasks of the chaos DAG whose processes KILL_TASK_PROCESS kills (PLANNING_IN_SPARK: a DAG
# without a plan task, pipeline_dag(plan_in_spark_task=True)).
TASKS = ("plan", "spark", "commit")
PLANNING_IN_SPARK = ("spark", "commit")


def draw(rng: random.Random, kind: str, points: Sequence[str], tasks: Sequence[str] = TASKS) -> Fault:
    """The details of one fault of ``kind``."""
    if kind in (POINT_CRASH, POINT_RAISE):
        return _point_fault(rng, kind, points)
    if kind == KILL_SPARK_SUBMIT:
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 12.0), 2)})
    if kind == KILL_PYTHON_WORKER:
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 3.0), 2)})
    if kind == KILL_TASK_PROCESS:
        task = rng.choice(tasks)
        return Fault(kind, {"task": task, "after_s": round(rng.uniform(0.0, 8.0 if task == "spark" else 2.5), 2)})
    if kind == BROKER_RESTART:  # (a Spark Connect run often ends first: about 10 s against 25 s)
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 30.0), 2)})
    if kind == BROKER_UNREACHABLE:
        return Fault(kind, {"hold_s": round(rng.uniform(2.0, 25.0), 2)})
    if kind == BROKER_FENCE:
        return Fault(kind, {})
    if kind == BROKER_ABORT_AFTER_COMMIT:
        return Fault(kind, {"faults": "ledger.decision.after_write=crash"})
    if kind == LOSE_WORKER:
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 10.0), 2)})
    if kind == PARTITION_ADDED:
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 5.0), 2), "records": rng.randint(5, 40)})
    if kind == OVERSIZED_RECORD:  # the runner puts the record among the batch's input when it produces it
        return Fault(kind, {})
    if kind in CONNECT_KINDS:  # seconds after the spark task's process (the client) starts; its job takes 2-4 s
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 4.0), 2)})
    if kind == TWO_RUNS_AT_ONCE:  # seconds into the run: before, during or after its plan task
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 6.0), 2)})
    if kind == COMMIT_DELAYED:  # held this long past the guard
        return Fault(kind, {"past_guard_s": round(rng.uniform(2.0, 10.0), 2)})
    if kind == NODE_KILLED:  # which node, when (seconds into the run), and for how long it stays down
        return Fault(kind, {"node": rng.randint(1, 3), "after_s": round(rng.uniform(0.0, 12.0), 2),
                            "down_s": round(rng.uniform(1.0, 10.0), 2)})
    if kind == CONTROLLER_KILLED:
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 12.0), 2), "down_s": round(rng.uniform(1.0, 10.0), 2)})
    if kind == COORDINATOR_KILLED:  # seconds after the commit task starts
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 1.5), 2), "down_s": round(rng.uniform(1.0, 10.0), 2)})
    if kind == TIMEOUT_BEFORE_DECISION:
        return Fault(kind, {})
    if kind == TIMEOUT_AFTER_DECISION:
        return Fault(kind, {"faults": "ledger.decision.after_write=crash"})
    if kind == POSTGRES_CRASHED:  # seconds after the commit task starts, and how long the server stays down
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 1.5), 2), "down_s": round(rng.uniform(1.0, 8.0), 2)})
    if kind == POSTGRES_CONNECTIONS_KILLED:  # from the batch's first PREPARE or the commit task's start, for how long
        return Fault(kind, {"at": rng.choice(("prepare", "commit")), "for_s": round(rng.uniform(1.0, 6.0), 2)})
    if kind == CATALOG_KILLED:  # seconds after the commit task starts, and how long the catalog stays down
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 1.5), 2), "down_s": round(rng.uniform(1.0, 8.0), 2)})
    if kind == FROZEN_ZOMBIE:  # let go once batch + TXN_ID_POOL has pre-committed its first Kafka output
        return Fault(kind, {"faults": _HOLD_BEFORE_KAFKA, "meets": f"batch + {TXN_ID_POOL}"})
    if kind == S3_FAULTS:
        # Shares of S3 requests to fail in this batch, by S3 fault kind.
        return Fault(kind, {"error_share": round(rng.uniform(0.03, 0.12), 3)})
    raise ValueError(f"unknown chaos fault kind {kind!r}; known: {', '.join(KNOWN_KINDS)}")


def zombie_runs(batches: int) -> range:
    """The runs that freeze a zombie: the first ones, as many as leave ``TXN_ID_POOL`` runs after the last
    (its batch's pooled ids come round again there) and one to spare, at most ``ZOMBIES_AT_ONCE``."""
    return range(1, 1 + max(0, min(ZOMBIES_AT_ONCE, batches - TXN_ID_POOL - 1)))


def fault_sequence(seed: int, batches: int, kinds: Sequence[str], points: Sequence[str] | None = None,
                   tasks: Sequence[str] = TASKS) -> list[Fault]:
    """``batches`` faults, one per batch, reproducible from ``seed``; ``tasks``: the DAG's protocol tasks."""
    if not kinds:
        raise ValueError("a chaos run needs at least one fault kind")
    points = sorted(points if points is not None else faults.declare_all())
    rng = random.Random(seed)
    freezing = zombie_runs(batches) if FROZEN_ZOMBIE in kinds else range(0)
    others = [kind for kind in kinds if kind != FROZEN_ZOMBIE]
    sequence: list[Fault] = []
    cycle: list[str] = []
    while len(sequence) < batches:
        if len(sequence) + 1 in freezing:
            sequence.append(draw(rng, FROZEN_ZOMBIE, points, tasks))
            continue
        if not others:
            sequence.append(Fault(NO_FAULT))
            continue
        if not cycle:
            cycle = list(others)
            rng.shuffle(cycle)
        sequence.append(draw(rng, cycle.pop(), points, tasks))
    return sequence


def sequence_json(sequence: Sequence[Fault]) -> str:
    return json.dumps([f.to_dict() for f in sequence])
