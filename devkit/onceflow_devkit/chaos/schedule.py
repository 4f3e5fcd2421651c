"""Which fault each batch of a chaos run gets: a pure function of the seed.

Kinds cycle in a freshly shuffled order (every ``len(kinds)`` batches each
kind comes up once), so a run of ``10 * len(kinds)`` batches asks for every
kind at least ten times; the details (which fault point, which task, how long
to wait) are drawn from the same seeded generator. Re-running with the same
seed and options asks for the same faults in the same order.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from onceflow import faults

POINT_CRASH = "point_crash"            # a named fault point ends its process (os._exit, like SIGKILL)
POINT_RAISE = "point_raise"            # a named fault point raises InjectedFault
KILL_SPARK_SUBMIT = "kill_spark_submit"    # SIGKILL of the spark-submit JVM (the driver)
KILL_PYTHON_WORKER = "kill_python_worker"  # SIGKILL of one of Spark's Python workers
KILL_TASK_PROCESS = "kill_task_process"    # SIGKILL of an Airflow task process (plan, spark or commit)
BROKER_RESTART = "broker_restart"      # the Kafka broker restarts at a random moment
BROKER_UNREACHABLE = "broker_unreachable"  # the broker stops answering (SIGSTOP) while commit runs
BROKER_FENCE = "broker_fence"          # the batch's open transactions aborted between pre-commit and commit
S3_FAULTS = "s3_faults"                # the S3 proxy fails a share of requests (5xx, SlowDown, resets, slow)

PROCESS_KINDS = (KILL_SPARK_SUBMIT, KILL_PYTHON_WORKER, KILL_TASK_PROCESS)
BROKER_KINDS = (BROKER_RESTART, BROKER_UNREACHABLE, BROKER_FENCE)
ALL_KINDS = (POINT_CRASH, POINT_RAISE, *PROCESS_KINDS, *BROKER_KINDS, S3_FAULTS)

# Points on the abort path fire only when a batch is rolled back: the run
# that asks for one also fails its Spark job right after the attempt starts.
_FORCE_ROLLBACK = "job.after_attempt=raise"
_ANY_MAX_HITS = 12  # '*' fires at the n-th step reached; a run takes roughly 20-40


def kinds_for(warehouse_on_s3: bool) -> tuple[str, ...]:
    """S3 faults need an S3 warehouse; every other kind applies everywhere."""
    return ALL_KINDS if warehouse_on_s3 else tuple(k for k in ALL_KINDS if k != S3_FAULTS)


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


def draw(rng: random.Random, kind: str, points: Sequence[str]) -> Fault:
    """The details of one fault of ``kind``."""
    if kind in (POINT_CRASH, POINT_RAISE):
        return _point_fault(rng, kind, points)
    if kind == KILL_SPARK_SUBMIT:
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 12.0), 2)})
    if kind == KILL_PYTHON_WORKER:
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 3.0), 2)})
    if kind == KILL_TASK_PROCESS:
        task = rng.choice(("plan", "spark", "commit"))
        return Fault(kind, {"task": task, "after_s": round(rng.uniform(0.0, 8.0 if task == "spark" else 2.5), 2)})
    if kind == BROKER_RESTART:
        return Fault(kind, {"after_s": round(rng.uniform(0.0, 30.0), 2)})
    if kind == BROKER_UNREACHABLE:
        return Fault(kind, {"hold_s": round(rng.uniform(2.0, 25.0), 2)})
    if kind == BROKER_FENCE:
        return Fault(kind, {})
    if kind == S3_FAULTS:
        # Shares of S3 requests to fail in this batch, by S3 fault kind.
        return Fault(kind, {"error_share": round(rng.uniform(0.03, 0.12), 3)})
    raise ValueError(f"unknown chaos fault kind {kind!r}; known: {', '.join(ALL_KINDS)}")


def fault_sequence(seed: int, batches: int, kinds: Sequence[str], points: Sequence[str] | None = None) -> list[Fault]:
    """``batches`` faults, one per batch, reproducible from ``seed``."""
    if not kinds:
        raise ValueError("a chaos run needs at least one fault kind")
    points = sorted(points if points is not None else faults.declare_all())
    rng = random.Random(seed)
    sequence: list[Fault] = []
    cycle: list[str] = []
    while len(sequence) < batches:
        if not cycle:
            cycle = list(kinds)
            rng.shuffle(cycle)
        sequence.append(draw(rng, cycle.pop(), points))
    return sequence


def sequence_json(sequence: Sequence[Fault]) -> str:
    return json.dumps([f.to_dict() for f in sequence])
