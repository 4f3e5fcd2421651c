"""``make demo``'s time on a fresh clone, and README's figures taken from it.

The source is ``docs/measurements/make-demo.log``: a header naming the date,
the commit and the machine, the seconds ``make venv`` and then ``make demo``
took in a fresh clone, and everything the demo printed. README's times of the
demo and of its batches are generated from it (``tests/unit/devkit/
test_demo_timings.py`` holds them to it). To measure again, on an idle
machine, in the repository's root::

    python -m onceflow_devkit.demo_timings measure   # a fresh clone of HEAD: make venv, make demo; saves the log
    python -m onceflow_devkit.demo_timings           # README's blocks again from the saved log
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from onceflow_devkit import doc_blocks

SOURCE = Path("docs") / "measurements" / "make-demo.log"
README_BLOCKS = (Path("README.md"), "make-demo-times", "make-demo-batches")  # the page and its two blocks
_STEP = re.compile(r"^# make (?P<target>venv|demo): (?P<seconds>[\d.]+) s$")
_RUN = re.compile(r"^\[run (?P<n>\d+)\]\s+(?P<kind>\w+)\s+(?P<state>\w+) in (?P<seconds>[\d.]+) s — (?P<rest>.*)$")
_TASK = re.compile(r"(?P<task>\w+) (?:success|failed) in (?P<seconds>[\d.]+) s")


@dataclass(frozen=True)
class DemoRun:
    n: int
    kind: str  # normal, fault (a failure injected after the votes) or retry (replays the aborted batch)
    state: str
    seconds: float
    tasks: dict[str, float]  # Airflow's own start and end of each task that ran


@dataclass(frozen=True)
class DemoMeasurement:
    header: str  # when, which commit, on what
    venv_seconds: float
    demo_seconds: float
    runs: tuple[DemoRun, ...]
    exactly_once: bool  # the demo's own verdict, both audits

    @property
    def total_seconds(self) -> float:
        return self.venv_seconds + self.demo_seconds


def parse(text: str) -> DemoMeasurement:
    lines = text.splitlines()
    steps = {m["target"]: float(m["seconds"]) for m in map(_STEP.match, lines) if m}
    if set(steps) != {"venv", "demo"}:
        raise ValueError("the saved make demo log lacks its '# make venv: S s' and '# make demo: S s' lines")
    runs = tuple(DemoRun(int(m["n"]), m["kind"], m["state"], float(m["seconds"]),
                         {t["task"]: float(t["seconds"]) for t in _TASK.finditer(m["rest"].rpartition(";")[2])})
                 for m in map(_RUN.match, lines) if m)
    if not runs:
        raise ValueError("the saved make demo log has no '[run N]' line: the demo did not get as far as its batches")
    return DemoMeasurement(lines[0].removeprefix("# "), steps["venv"], steps["demo"], runs,
                           any(line.startswith("[demo]    exactly once") for line in lines))


def _span(values: list[float]) -> str:
    low, high = round(min(values)), round(max(values))
    return f"{low} s" if low == high else f"{low}-{high} s"


def times_block(m: DemoMeasurement) -> str:
    """README's bullet: the fresh demo's time."""
    return (f"- a fresh `make demo`: {m.total_seconds:.0f} s, of which {m.venv_seconds:.0f} s create `.venv` (with pip's\n"
            f"  download cache already filled; the first download of the packages and of Apache\n"
            f"  Kafka's and HDFS's jars takes minutes more, once) and {m.demo_seconds:.0f} s run the demo, its two\n"
            f"  audits included ({m.header}; [its log](docs/measurements/make-demo.log));")


def batches_block(m: DemoMeasurement) -> str:
    """README's sentence: each kind of batch's time and its spark task's."""
    first, *later = m.runs
    committed = [r for r in later if r.kind != "fault"]
    faulted = [r for r in later if r.kind == "fault"]
    if not committed or not faulted:
        raise ValueError("the saved make demo log lacks a committed batch after the first, or the faulted one")
    return (f"It prints each run's time and its tasks' times. In the measured run the first\n"
            f"batch took {first.seconds:.0f} s (its spark task {first.tasks['spark']:.0f} s: the server\n"
            f"starts its Python workers), the next ones {_span([r.seconds for r in committed])} through\n"
            f"`airflow dags test`, of which the spark task took {_span([r.tasks['spark'] for r in committed])}; the faulted one "
            f"{_span([r.seconds for r in faulted])},\nbecause Airflow retries the spark task once before the rollback runs.")


def regenerate(root: Path) -> None:
    """README's two blocks, made again from the saved log."""
    page, times, batches = README_BLOCKS
    measured = parse((root / SOURCE).read_text())
    doc_blocks.write(root / page, times, times_block(measured))
    doc_blocks.write(root / page, batches, batches_block(measured))


def _timed(command: list[str], cwd: Path, log: Path) -> float:
    """Seconds ``command`` took; a failure raises with the end of its output (nothing is saved)."""
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}) in the fresh clone; its output ends:\n"
                           + "\n".join(log.read_text().splitlines()[-40:]))
    return time.monotonic() - started


def measure(root: Path) -> None:
    """A fresh clone of ``root``'s HEAD: ``make venv`` then ``make demo``, timed; the log saved to ``root``."""
    commit = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=root, check=True,
                            capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="onceflow-demo-") as scratch:
        os.chmod(scratch, 0o755)  # the demo's PostgreSQL runs as user postgres, which must reach its state below
        clone = Path(scratch) / "onceflow"
        subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
        venv = _timed(["make", "venv"], clone, Path(scratch) / "venv.log")
        demo = _timed(["make", "demo"], clone, Path(scratch) / "demo.log")
        printed = (Path(scratch) / "demo.log").read_text().splitlines()
    printed = printed[next(i for i, line in enumerate(printed) if line.startswith("[stack]")):]  # after make's own lines
    header = f"# {datetime.date.today()}, commit {commit}, a fresh clone, {os.cpu_count()} cores"
    (root / SOURCE).write_text("\n".join([header, f"# make venv: {venv:.1f} s", f"# make demo: {demo:.1f} s", *printed]) + "\n")


if __name__ == "__main__":  # python -m onceflow_devkit.demo_timings [measure], in the repository's root
    if sys.argv[1:] == ["measure"]:
        measure(Path.cwd())
    regenerate(Path.cwd())
