"""A batch's outputs pre-committed one after another or at once (pure logic: threads and fault points)."""

from __future__ import annotations

import threading
import time
import types

import pytest

from onceflow.core import faults
from onceflow.spark.batch_job import JOB_BETWEEN_OUTPUTS, pre_commit_at_once, pre_commit_in_turn

SINKS = tuple(types.SimpleNamespace(name=n) for n in ("files", "table", "clicks", "errors"))


@pytest.fixture(autouse=True)
def disarmed():
    faults.disarm()
    yield
    faults.disarm()


def test_at_once_every_output_runs_beside_the_others():
    # Each pre-commit waits for all four to have started: one after another, the first would wait in vain.
    started = threading.Barrier(len(SINKS), timeout=10)

    def pre_commit(sink):
        started.wait()
        return {"files": 0.4, "table": 0.3, "clicks": 0.2, "errors": 0.1}[sink.name]

    assert pre_commit_at_once(SINKS, pre_commit) == {"files": 0.4, "table": 0.3, "clicks": 0.2, "errors": 0.1}
    in_turn = threading.Barrier(len(SINKS), timeout=0.2)  # one after another, the first waits alone
    with pytest.raises(threading.BrokenBarrierError):
        pre_commit_in_turn(SINKS, lambda sink: in_turn.wait())


def test_at_once_the_first_failure_is_raised_while_the_others_still_run():
    release = threading.Event()

    def pre_commit(sink):
        if sink.name == "table":
            raise RuntimeError("the table's writer failed")
        release.wait(30)  # a query still running on the server
        return 0.0

    began = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="the table's writer failed"):
            pre_commit_at_once(SINKS, pre_commit)
        assert time.monotonic() - began < 5  # not after the others: the caller interrupts them
    finally:
        release.set()


@pytest.mark.parametrize("at_once", [False, True], ids=["in turn", "at once"])
def test_the_point_between_outputs_fires_with_one_voted_and_another_not(at_once):
    voted, release = [], threading.Event()

    def pre_commit(sink):
        if sink.name != "files":
            release.wait(30 if at_once else 0)  # at once: the others are still running
        voted.append(sink.name)
        return 0.0

    faults.arm(JOB_BETWEEN_OUTPUTS, "raise")
    try:
        with pytest.raises(faults.InjectedFault):
            (pre_commit_at_once if at_once else pre_commit_in_turn)(SINKS, pre_commit)
        assert voted == ["files"]
    finally:
        release.set()
