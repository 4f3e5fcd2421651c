"""README's time of `make test` and docs/testing.md's slowest tests have one source: the end of a
clean-clone run's output, saved in docs/measurements/make-test.log."""

from __future__ import annotations

import re

import pytest

from onceflow_devkit import suite_timings
from tests.support import ROOT

LOG = """# 2026-11-26, commit 8bc73fa, 2 idle cores
============================= slowest 2 durations =============================
165.92s call     tests/system/e2e/test_interval_backfill.py::test_a_backfill
54.11s setup    tests/system/e2e/test_onceflow_page.py::test_every_route[apache]
== 868 passed, 1 skipped, 179 deselected, 220 warnings in 1347.93s (0:22:27) ===
"""


def test_the_log_gives_the_total_and_each_slow_test():
    run = suite_timings.parse(LOG)
    assert (run.passed, run.skipped, run.minutes, run.total) == (868, 1, "22.5 minutes", "1,348 s, 868 passed")
    assert [(s.seconds, s.phase, s.test) for s in run.slowest] == [
        (165.92, "call", "tests/system/e2e/test_interval_backfill.py::test_a_backfill"),
        (54.11, "setup", "tests/system/e2e/test_onceflow_page.py::test_every_route[apache]")]
    table = suite_timings.markdown(run)
    assert "(2026-11-26, commit 8bc73fa, 2 idle cores)" in table
    assert "| `tests/system/e2e/test_onceflow_page.py` `test_every_route[apache]` (the setup of its fixtures) | 54 |" in table


def test_a_log_without_its_summary_line_is_refused():
    with pytest.raises(ValueError, match="no pytest summary line"):
        suite_timings.parse(LOG.splitlines()[1])


def test_readme_and_docs_testing_show_the_saved_run():
    run = suite_timings.parse((ROOT / suite_timings.SOURCE).read_text())
    readme = (ROOT / "README.md").read_text()
    assert f"`make test`: {run.minutes} of tests on a clean clone ({run.total}," in readme, (
        f"README's make test time differs from {suite_timings.SOURCE}: {run.minutes}, {run.total}")
    testing = (ROOT / "docs" / "testing.md").read_text()
    block = re.search(r"<!-- make-test-timings begin -->\n(.*?)\n<!-- make-test-timings end -->", testing, re.S)
    assert block, "docs/testing.md lost the markers around the slowest tests"
    assert block.group(1).strip() == suite_timings.markdown(run), (
        f"docs/testing.md's slowest tests differ from {suite_timings.SOURCE}: regenerate them with suite_timings.markdown")
    for slow in run.slowest:  # a table naming a test that moved or went is stale
        assert (ROOT / slow.test.partition("::")[0]).exists(), f"{slow.test} is gone: save a new run's log"
