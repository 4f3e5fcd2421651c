"""``make test``'s own account of its time, and the figures the docs take from it.

The source is ``docs/measurements/make-test.log``: what pytest printed at the
end of a ``make test`` on a clean clone (``.ci/run``), its slowest tests
(``--durations``) and its summary line, under a header naming the date and
the commit. README's total and docs/testing.md's table of the slowest tests
are checked against it (``tests/unit/devkit/test_suite_timings.py``), so each
figure has that one source; after a new clean-clone run, save its tail there
and regenerate the table: ``python -m onceflow_devkit.suite_timings``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path("docs") / "measurements" / "make-test.log"
_SUMMARY = re.compile(r"=+ (?P<passed>\d+) passed(?:, (?P<skipped>\d+) skipped)?.*? in (?P<seconds>[\d.]+)s ")
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

    @property
    def minutes(self) -> str:
        return f"{self.seconds / 60:.1f} minutes"

    @property
    def total(self) -> str:
        """README's figure: ``1,348 s, 868 passed``."""
        return f"{self.seconds:,.0f} s, {self.passed} passed"


def parse(text: str) -> SuiteRun:
    summary = _SUMMARY.search(text)
    if summary is None:
        raise ValueError("no pytest summary line (N passed ... in S s) in the saved make test log")
    slowest = tuple(SlowTest(float(m["seconds"]), m["phase"], m["test"])
                    for m in map(_DURATION.match, text.splitlines()) if m)
    header = tuple(line[2:] for line in text.splitlines() if line.startswith("# "))
    return SuiteRun(header, int(summary["passed"]), int(summary["skipped"] or 0), float(summary["seconds"]), slowest)


def markdown(run: SuiteRun) -> str:
    """docs/testing.md's table of the slowest tests of that run."""
    lines = [f"The slowest tests of `make test` on a clean clone ({'; '.join(run.header)}):", "",
             "| test | seconds |", "| --- | --- |"]
    for slow in run.slowest:
        path, _, name = slow.test.partition("::")
        setup = " (the setup of its fixtures)" if slow.phase == "setup" else ""
        lines.append(f"| `{path}` `{name}`{setup} | {slow.seconds:.0f} |")
    return "\n".join(lines)


TABLE = (Path("docs") / "testing.md", "<!-- make-test-timings begin -->\n", "<!-- make-test-timings end -->")


def replace_between(page: Path, begin: str, end: str, text: str) -> None:
    """``page`` with ``text`` between its markers ``begin`` and ``end``."""
    old = page.read_text()
    start, stop = old.index(begin) + len(begin), old.index(end)
    page.write_text(old[:start] + text + "\n" + old[stop:])


def regenerate(root: Path) -> None:
    """docs/testing.md's table, made again from the saved log."""
    page, begin, end = TABLE
    replace_between(root / page, begin, end, markdown(parse((root / SOURCE).read_text())))


if __name__ == "__main__":  # python -m onceflow_devkit.suite_timings, in the repository's root
    regenerate(Path.cwd())
