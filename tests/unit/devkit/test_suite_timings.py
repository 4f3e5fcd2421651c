"""README's time of `make test` and docs/testing.md's slowest tests have one source: the end of a
clean-clone run's output, saved in docs/measurements/make-test.log."""

from __future__ import annotations

import pytest

from onceflow_devkit import doc_blocks, suite_timings
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


def test_the_slow_set_table_adds_up_each_file_s_phases():
    run = suite_timings.parse(LOG + "12.50s teardown tests/system/e2e/test_interval_backfill.py::test_a_backfill\n")
    table = suite_timings.slow_markdown(run)
    assert ": 1,348 s, 868 passed, in 22.5 minutes." in table
    assert table.splitlines()[-2:] == ["| `tests/system/e2e/test_interval_backfill.py` | 178 |",
                                       "| `tests/system/e2e/test_onceflow_page.py` | 54 |"]


def test_readme_and_docs_testing_show_the_saved_runs():
    run = suite_timings.parse((ROOT / suite_timings.SOURCE).read_text())
    readme = (ROOT / "README.md").read_text()
    assert f"`make test`: {run.minutes} of tests on a clean clone ({run.total}," in readme, (
        f"README's make test time differs from {suite_timings.SOURCE}: {run.minutes}, {run.total}")
    for source, block, make in suite_timings.TABLES:
        saved = suite_timings.parse((ROOT / source).read_text())
        assert doc_blocks.read(ROOT / suite_timings.PAGE, block) == make(saved), (
            f"docs/testing.md's {block} differ from {source}: python -m onceflow_devkit.suite_timings")
        for slow in saved.slowest:  # a table naming a test that moved or went is stale
            assert (ROOT / slow.test.partition("::")[0]).exists(), f"{slow.test} is gone: save a new run's log"


def test_a_saved_run_with_failures_says_so_in_its_figures():
    run = suite_timings.parse(LOG.replace("== 868 passed", "= 2 failed, 868 passed"))
    assert (run.failed, run.passed, run.total) == (2, 868, "1,348 s, 868 passed, 2 failed")
