"""Which committed batches ``onceflow audit`` replays (pure logic)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from onceflow.ops.audit.replay import BatchDiff, OutputReport, ReplayReport, parse_batches, select
from onceflow.ops.cli import main
from onceflow.config.settings import ConfigurationError


def committed(*seqs: int) -> list:
    return [(SimpleNamespace(batch_seq=s, batch_id=f"{s:010d}"), None) for s in seqs]


def test_batches_are_numbers_and_ranges():
    assert parse_batches("3-5,9, 12") == {3, 4, 5, 9, 12}
    with pytest.raises(ConfigurationError, match="e.g. 3-7,9"):
        parse_batches("3..5")


def test_named_batches_that_did_not_commit_are_passed_over_but_some_must_have():
    assert [p.batch_seq for p, _ in select(committed(1, 2, 4, 5), batches="2-4")] == [2, 4]
    with pytest.raises(ConfigurationError, match="no committed batch among them"):
        select(committed(1, 2, 4, 5), batches="3")


def test_a_sample_is_drawn_by_its_seed_and_kept_in_batch_order():
    batches = committed(*range(1, 51))
    drawn = [p.batch_seq for p, _ in select(batches, sample=5, seed=7)]
    assert drawn == sorted(drawn) and len(set(drawn)) == 5
    assert drawn == [p.batch_seq for p, _ in select(batches, sample=5, seed=7)]
    assert drawn != [p.batch_seq for p, _ in select(batches, sample=5, seed=8)]
    assert len(select(batches, sample=80)) == 50


def test_a_difference_or_a_finding_fails_the_report():
    clean = OutputReport("out", "read", [BatchDiff("0000000001", "out", 3, 3)])
    report = ReplayReport("p", 1, ["0000000001"], [], {"out": clean}, [])
    assert report.ok and report.to_dict()["outputs"]["out"]["found"] == 3
    clean.findings.append("a file no manifest lists")
    assert not report.ok
    clean.findings.clear()
    clean.batches.append(BatchDiff("0000000002", "out", 0, 1, unexpected=1))
    assert not report.ok and "batch 0000000002: 1 found, 0 replayed" in report.summary()


def test_batches_and_sample_together_are_refused(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("ONCEFLOW_WAREHOUSE", f"file://{tmp_path}")
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    code = main(["audit", "--pipeline", "orders", "--spec", "tests.doubles.specs:ORDERS",
                 "--batches", "1", "--sample", "2"])
    assert code == 2 and "give --batches or --sample, not both" in capsys.readouterr().err


def test_each_guarantee_fails_only_on_what_it_does_not_allow():
    copies = dict(expected=3, found=6, duplicates=3)
    lost = dict(expected=3, found=0, missing=3)
    for guarantee, fails in (("exactly_once", {"copies", "lost"}), ("at_least_once", {"lost"}), ("none", {"copies"})):
        for name, counts in (("copies", copies), ("lost", lost)):
            diff = BatchDiff("0000000002", "out", guarantee=guarantee, **counts)
            assert diff.ok is (name not in fails), (guarantee, name)
    # rows the job wrote under a batch that did not commit are counted apart, whatever the guarantee lets pass
    assert not BatchDiff("0000000001", "out", found=2, unexpected=2, guarantee="at_least_once").ok
    assert BatchDiff("0000000001", "out", found=2, not_committed=2, guarantee="at_least_once").ok
