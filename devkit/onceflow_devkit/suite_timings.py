"""The test suite's own account of its time, and the figures the docs take from it.

Two sources, each what pytest printed at the end of a run (its tests' times,
``--durations``, and its summary line) under a header naming the date and the
commit: ``docs/measurements/make-test.log``, a ``make test`` on a clean clone
(``.ci/run``), and ``docs/measurements/make-test-slow.log``, a ``make
test-slow`` (the tests ``make test`` leaves out). README's total and
docs/testing.md's two tables are checked against them
(``tests/unit/devkit/test_suite_timings.py``), so each figure has one source;
after a new run, save its tail there and regenerate the tables:
``python -m onceflow_devkit.suite_timings``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from onceflow_devkit import doc_blocks

SOURCE = Path("docs") / "measurements" / "make-test.log"
SLOW_SOURCE = Path("docs") / "measurements" / "make-test-slow.log"
_SUMMARY = re.compile(r"=+ (?:(?P<failed>\d+) failed, )?(?P<passed>\d+) passed(?:, (?P<skipped>\d+) skipped)?.*? in (?P<seconds>[\d.]+)s ")
_DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>call|setup|teardown)\s+(?P<test>.+?)\s*$")


@dataclass(frozen=True)
class SlowTest:
    seconds: float
    phase: str  # call, or setup: a module's fixture (its services, its Airflow) charged to its first test
    test: str   # pytest's node id


@dataclass(frozen=True)
class SuiteRun:
    header: tuple[str, ...]  # the log's own "# ..." lines: when, on what
    passed: int
    skipped: int
    seconds: float
    slowest: tuple[SlowTest, ...]
    failed: int = 0  # a saved run with failures says so wherever its figures appear

    @property
    def minutes(self) -> str:
        return f"{self.seconds / 60:.1f} minutes"

    @property
    def total(self) -> str:
        """README's figure: ``1,348 s, 868 passed`` (``, 2 failed`` when some did)."""
        return f"{self.seconds:,.0f} s, {self.passed} passed" + (f", {self.failed} failed" if self.failed else "")


def parse(text: str) -> SuiteRun:
    summary = _SUMMARY.search(text)
    if summary is None:
        raise ValueError("no pytest summary line (N passed ... in S s) in the saved make test log")
    slowest = tuple(SlowTest(float(m["seconds"]), m["phase"], m["test"])
                    for m in map(_DURATION.match, text.splitlines()) if m)
    header = tuple(line[2:] for line in text.splitlines() if line.startswith("# "))
    return SuiteRun(header, int(summary["passed"]), int(summary["skipped"] or 0), float(summary["seconds"]), slowest,
                    int(summary["failed"] or 0))


def markdown(run: SuiteRun) -> str:
    """docs/testing.md's table of the slowest tests of that run."""
    lines = [f"The slowest tests of `make test` on a clean clone ({'; '.join(run.header)}):", "",
             "| test | seconds |", "| --- | --- |"]
    for slow in run.slowest:
        path, _, name = slow.test.partition("::")
        setup = " (the setup of its fixtures)" if slow.phase == "setup" else ""
        lines.append(f"| `{path}` `{name}`{setup} | {slow.seconds:.0f} |")
    return "\n".join(lines)


def slow_markdown(run: SuiteRun) -> str:
    """docs/testing.md's table of the slow set: each test file's time (its tests and their fixtures)."""
    files: dict[str, float] = {}
    for slow in run.slowest:
        path = slow.test.partition("::")[0]
        files[path] = files.get(path, 0.0) + slow.seconds
    lines = [f"`make test-slow` ({'; '.join(run.header)}): {run.total}, in {run.minutes}. Each test file's time: "
             "its tests and their fixtures' setup and teardown, each phase that took a second or more:", "",
             "| test file | seconds |", "| --- | --- |"]
    lines += [f"| `{path}` | {seconds:.0f} |" for path, seconds in sorted(files.items(), key=lambda item: -item[1])]
    return "\n".join(lines)


# docs/testing.md's generated blocks (doc_blocks): each with its source log and what makes it.
TABLES = ((SOURCE, "make-test-timings", markdown), (SLOW_SOURCE, "slow-test-timings", slow_markdown))
PAGE = Path("docs") / "testing.md"


def regenerate(root: Path) -> None:
    """docs/testing.md's tables, made again from the saved logs."""
    for source, block, make in TABLES:
        doc_blocks.write(root / PAGE, block, make(parse((root / source).read_text())))


if __name__ == "__main__":  # python -m onceflow_devkit.suite_timings, in the repository's root
    regenerate(Path.cwd())
