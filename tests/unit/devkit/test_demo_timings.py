"""README's times of `make demo` and of its batches have one source: a fresh clone's demo, saved in
docs/measurements/make-demo.log."""

from __future__ import annotations

import pytest

from onceflow_devkit import demo_timings, doc_blocks
from tests.support import ROOT

LOG = """# 2026-11-27, commit 569ec99, a fresh clone, 2 idle cores
# make venv: 98.8 s
# make demo: 108.4 s
[stack]   kafka (apache) on 127.0.0.1:9092, S3 on http://127.0.0.1:9000; state in /tmp/x
[run 1]   normal success in 29.4 s — batch 0000000001: 1200 records, committed; plan success in 4.0 s, spark success in 18.5 s, commit success in 1.5 s
[run 2]   fault  failed in 23.6 s — batch 0000000002: 1200 records, aborted; plan success in 4.2 s, spark failed in 4.6 s, rollback success in 0.5 s
[run 3]   retry  success in 12.6 s — batch 0000000003: 1200 records, committed (replays aborted batch 0000000002); plan success in 3.6 s, spark success in 2.9 s, commit success in 0.5 s
[run 4]   normal success in 14.3 s — batch 0000000004: 600 records, committed; plan success in 4.2 s, spark success in 3.6 s, commit success in 0.5 s
[demo]    exactly once: every input record counted once in every output, every batch replayed equal (106 s).
"""


def test_the_log_gives_each_step_and_each_batch_with_its_tasks():
    measured = demo_timings.parse(LOG)
    assert (measured.venv_seconds, measured.demo_seconds, round(measured.total_seconds, 1)) == (98.8, 108.4, 207.2)
    assert measured.header == "2026-11-27, commit 569ec99, a fresh clone, 2 idle cores" and measured.exactly_once
    assert [(r.n, r.kind, r.state, r.seconds) for r in measured.runs] == [
        (1, "normal", "success", 29.4), (2, "fault", "failed", 23.6), (3, "retry", "success", 12.6),
        (4, "normal", "success", 14.3)]
    assert measured.runs[1].tasks == {"plan": 4.2, "spark": 4.6, "rollback": 0.5}


def test_readme_figures_are_the_first_batch_the_span_of_the_later_ones_and_the_faulted_one():
    measured = demo_timings.parse(LOG)
    assert "a fresh `make demo`: 207 s, of which 99 s create `.venv`" in demo_timings.times_block(measured)
    batches = " ".join(demo_timings.batches_block(measured).split())
    assert "the first batch took 29 s (its spark task 18 s:" in batches
    assert "the next ones 13-14 s through `airflow dags test`, of which the spark task took 3-4 s;" in batches
    assert "the faulted one 24 s," in batches


@pytest.mark.parametrize(("lines", "error"), [
    (lambda text: text.replace("# make venv: 98.8 s\n", ""), "lacks its '# make venv: S s'"),
    (lambda text: "\n".join(line for line in text.splitlines() if not line.startswith("[run")), "no '\\[run N\\]' line"),
])
def test_a_log_without_its_steps_or_batches_is_refused(lines, error):
    with pytest.raises(ValueError, match=error):
        demo_timings.parse(lines(LOG))


def test_a_log_without_the_faulted_batch_makes_no_sentence():
    measured = demo_timings.parse("\n".join(line for line in LOG.splitlines() if "fault" not in line))
    with pytest.raises(ValueError, match="the faulted one"):
        demo_timings.batches_block(measured)


def test_readme_shows_the_saved_demo():
    measured = demo_timings.parse((ROOT / demo_timings.SOURCE).read_text())
    assert measured.exactly_once, f"{demo_timings.SOURCE} is a demo that did not end exactly once"
    page, times, batches = demo_timings.README_BLOCKS
    for block, made in ((times, demo_timings.times_block), (batches, demo_timings.batches_block)):
        assert doc_blocks.read(ROOT / page, block) == made(measured), (
            f"README's {block} differ from {demo_timings.SOURCE}: python -m onceflow_devkit.demo_timings")
