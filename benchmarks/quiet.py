"""Start each timed run on a quiet machine.

noida-db re-saves everything it stores (every topic, as one JSON file) a
moment after each write: about 5 CPU seconds per million click events held.
On two cores, a save that overlaps a timed run slows whichever side it lands
on by 10-30%, at random. Waiting until the machine is idle before each timed
run keeps one side's writes from being billed to the other.

"Idle" means idle for ``QUIET_FOR_S`` seconds in a row: the save starts
about a second after the last write (measured: a one-record write to an
idle broker, the save's CPU began 1.0-1.5 s later), so one idle second right
after a run ended could be the pause before that run's save, which then
landed on the next side.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

IDLE_BELOW = 0.15   # busy fraction of all cores, over one sample
SAMPLE_S = 1.0
QUIET_FOR_S = 3     # idle samples in a row, longer than noida-db's pause before a save


def _busy_and_total() -> tuple[int, int]:
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_fraction(sample_s: float = SAMPLE_S) -> float:
    """Share of all cores busy over ``sample_s`` (Linux /proc/stat)."""
    busy0, total0 = _busy_and_total()
    time.sleep(sample_s)
    busy1, total1 = _busy_and_total()
    return (busy1 - busy0) / max(1, total1 - total0)


def wait_for_quiet(limit_s: float = 120.0) -> float:
    """Block until ``QUIET_FOR_S`` samples in a row show the machine idle; returns the seconds waited.

    Gives up after ``limit_s`` and says so: the run then goes ahead on a busy machine.
    """
    start = time.monotonic()
    idle_samples = 0
    while True:
        busy = busy_fraction()
        waited = time.monotonic() - start
        idle_samples = idle_samples + 1 if busy < IDLE_BELOW else 0
        if idle_samples >= QUIET_FOR_S:
            return waited
        if waited > limit_s:
            print(f"# machine still {busy:.0%} busy after {waited:.0f} s; timing anyway", flush=True)
            return waited


def _tree_cpu_s(root: int) -> float:
    """CPU seconds used so far by ``root`` and every live descendant (Spark's JVM, Python workers)."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0.0)
        stack.extend(child for child, parent in parents.items() if parent == pid)
    return total


@dataclass
class CpuMeter:
    """CPU seconds the machine spent during a timed run, split into this benchmark's own
    process tree and everything else (the brokers, S3, the OS). Use as a context manager."""

    own_s: float = 0.0
    others_s: float = 0.0

    def __enter__(self) -> "CpuMeter":
        self._busy0 = _busy_and_total()[0]
        self._own0 = _tree_cpu_s(os.getpid())
        return self

    def __exit__(self, *exc) -> None:
        busy_s = (_busy_and_total()[0] - self._busy0) / os.sysconf("SC_CLK_TCK")
        self.own_s = _tree_cpu_s(os.getpid()) - self._own0
        self.others_s = max(0.0, busy_s - self.own_s)
