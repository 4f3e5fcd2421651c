"""Frozen zombies of a chaos run: spark tasks of older batches, let go while later ones run.

Runs in the chaos harness, a thread beside the runs. Call sequence::

    pen = ZombiePen(runtime); pen.start()             runner, before the first run
    pen.hold(n, batch, attempt, ...)                  frozen_zombie injector, in batch k's run: the job's
                                                      Python workers stopped (SIGSTOP) before its Kafka
                                                      writers opened their transactions, its task failed
    (pen's thread) batch k + TXN_ID_POOL has voted    SIGCONT: the workers run their Kafka tasks, whose
      the zombie's output, no decision yet            init_transactions takes the pooled ids k + 16 holds
    pen.finish()                                      runner, after the drain: what each zombie did

A zombie counts as injected only when it was let go while the batch holding
its pooled ids was in flight and its writers opened a transaction there (a
staged copy of its attempt appeared): one that met nobody proved nothing.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from onceflow.config.warehouse_layout import kafka_staging_dir
from onceflow.core.batch_id import BatchId
from onceflow.core.plan import TXN_ID_POOL
from onceflow.storage import warehouse_storage
from onceflow_devkit.chaos import schedule
from onceflow_devkit.chaos.injectors import Injection, signal_each

_POLL_S = 0.25
# After SIGCONT, how long the zombie's job may take to end (its Kafka tasks, then its failed vote or abort).
_EXIT_WAIT_S = 180.0


@dataclass
class Zombie:
    """One frozen spark task: batch ``batch_seq``'s attempt ``attempt``, stopped before writing ``sink``."""

    n: int                           # the chaos run that froze it
    batch_seq: int
    attempt: int
    sink: str                        # the Kafka output its job was about to write
    job: psutil.Process              # its spark-submit JVM (left running: its task waits on the workers)
    frozen: list[psutil.Process]     # pyspark's daemon and its workers, stopped
    meets: int = 0                   # the batch that holds its pooled ids next
    resumed_at: float | None = None  # time.monotonic()
    met: str = ""                    # the batch it was let go in, as it was then
    in_flight: bool = False          # that batch was planned and unfinished when it was let go
    opened: list[str] = field(default_factory=list)  # staged copies its writers made after SIGCONT
    exited_s: float | None = None    # its job's end, seconds after SIGCONT

    def __post_init__(self) -> None:
        self.meets = self.meets or self.batch_seq + TXN_ID_POOL

    def pids(self) -> set[int]:
        return {self.job.pid, *(p.pid for p in self.frozen)}


def _kill_job(zombie: Zombie) -> None:
    """SIGKILL the zombie's job and everything it started (a stopped process dies of SIGKILL too)."""
    try:
        tree = [zombie.job, *zombie.job.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    signal_each([*zombie.frozen, *tree], signal.SIGKILL)


class ZombiePen:
    """The run's frozen zombies, and the thread that lets each go when its pooled ids' next holder runs."""

    def __init__(self, runtime: Any):
        self.runtime = runtime
        self.zombies: list[Zombie] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="chaos-zombies", daemon=True)

    def start(self) -> "ZombiePen":
        self._thread.start()
        return self

    def hold(self, n: int, batch_seq: int, attempt: int, sink: str, job: psutil.Process,
             frozen: list[psutil.Process]) -> Zombie:
        """Keep the zombie frozen by run ``n`` (the fields of ``Zombie``) until its pooled ids' next holder runs."""
        zombie = Zombie(n, batch_seq, attempt, sink, job, frozen)
        with self._lock:
            self.zombies.append(zombie)
        return zombie

    def pids(self) -> set[int]:
        """Every process a zombie holds: other injectors must not pick them."""
        with self._lock:
            return {pid for z in self.zombies for pid in z.pids()}

    def _watch(self) -> None:
        while not self._stop.wait(_POLL_S):
            with self._lock:
                zombies = list(self.zombies)
            for zombie in zombies:
                try:
                    self._look_after(zombie)
                except Exception:  # a ledger read that failed mid-write: look again next round
                    pass

    def _look_after(self, zombie: Zombie) -> None:
        if zombie.resumed_at is None:
            meeting = self._meeting(zombie)
            if meeting is not None:
                zombie.met, zombie.in_flight = meeting
                zombie.resumed_at = time.monotonic()
                signal_each(zombie.frozen, signal.SIGCONT)
        elif zombie.exited_s is None:
            zombie.opened = sorted(set(zombie.opened) | set(self._staged_by(zombie)))
            if not zombie.job.is_running():
                zombie.exited_s = round(time.monotonic() - zombie.resumed_at, 1)

    def _meeting(self, zombie: Zombie) -> tuple[str, bool] | None:
        """When to let ``zombie`` go: (the batch it meets, as it is now; in flight), or None to wait. The moment
        is the batch that holds its ids having voted for the zombie's output, before its decision; a batch
        that finished without that moment lets it go all the same, meeting no one."""
        coordinator = self.runtime.coordinator
        if coordinator.latest_seq() < zombie.meets:
            return None
        status = coordinator.describe(zombie.meets)
        if status.state.terminal:
            return f"batch {status.batch_id} had already {status.state.value}", False
        if zombie.sink in status.votes and status.decision is None:
            return (f"batch {status.batch_id} (attempt {status.attempt}) had pre-committed {zombie.sink}, "
                    "not decided yet"), True
        return None

    def _staged_by(self, zombie: Zombie) -> list[str]:
        """The staged copies of the zombie's attempt in its batch's staging: a writer makes one right after
        init_transactions and begin_transaction succeeded (sinks.kafka.writer)."""
        deployment = self.runtime.deployment
        staging = kafka_staging_dir(deployment.warehouse, self.runtime.spec.name, zombie.sink, str(BatchId(zombie.batch_seq)))
        return [name for name in warehouse_storage(deployment).list_tree(staging)
                if f"-attempt-{zombie.attempt}-" in name]

    def finish(self) -> dict[int, Injection]:
        """Stop watching, wait for the let-go zombies' jobs to end, kill what is left; per freezing run,
        what its zombie did."""
        with self._lock:
            zombies = list(self.zombies)
        deadline = time.monotonic() + _EXIT_WAIT_S
        while any(z.resumed_at is not None and z.exited_s is None for z in zombies) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        self._stop.set()
        self._thread.join(timeout=30)
        for zombie in zombies:
            if zombie.exited_s is None:
                _kill_job(zombie)
        return {z.n: outcome(z, self.runtime.coordinator) for z in zombies}

    def kill_all(self) -> None:
        """The harness failed: leave no zombie behind."""
        self._stop.set()
        with self._lock:
            for zombie in self.zombies:
                _kill_job(zombie)


def outcome(zombie: Zombie, coordinator: Any) -> Injection:
    """What ``zombie`` did, as its freezing run's Injection (injected: it met the batch holding its ids)."""
    frozen = (f"batch {BatchId(zombie.batch_seq)}'s spark task (attempt {zombie.attempt}) frozen before its "
              f"{zombie.sink} writers opened their transactions")
    if zombie.resumed_at is None:
        return Injection(schedule.FROZEN_ZOMBIE, False, f"{frozen}; batch {BatchId(zombie.meets)} never came: killed")
    end = (f"its job ended {zombie.exited_s} s later" if zombie.exited_s is not None
           else f"its job had not ended {_EXIT_WAIT_S:.0f} s later: killed")
    if not zombie.in_flight or not zombie.opened:
        return Injection(schedule.FROZEN_ZOMBIE, False, f"{frozen}; let go when {zombie.met}, its writers opened "
                         f"{len(zombie.opened)} transaction(s): it met no batch holding its ids; {end}")
    held_by = coordinator.describe(zombie.meets)
    return Injection(schedule.FROZEN_ZOMBIE, True,
                     f"{frozen}; let go when {zombie.met}: its writers opened {len(zombie.opened)} transaction(s) on "
                     f"the pooled ids that batch held ({', '.join(zombie.opened)}); {end}; batch {held_by.batch_id} "
                     f"ended {held_by.state.value} after {held_by.attempt} attempt(s)",
                     counts={"zombie_transactions": len(zombie.opened)})
