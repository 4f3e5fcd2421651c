"""The offsets planner and the interval planner follow one set of rules when a
batch is planned again (``core.planning.reruns``): a retry of the same run
gets its plan back, and a replay keeps the transform parameters of the batch
it replays. Each test runs against both planners, on a local ledger."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import pytest

from onceflow.core.ledger.storage import open_ledger_storage
from onceflow.core.plan import Interval, Plan
from onceflow.core.planning.interval_planner import IntervalPlanner

from tests.doubles.helpers import config, source, world_coordinator

# Record timestamps are 1000 + 10 * offset (FakeSource): this interval is offsets [0, 100).
INTERVAL = Interval(1000, 2000)
NOW = 10_000_000  # long after the interval's grace period


def offsets_planner(coord, src) -> Callable[[str, Mapping[str, Any]], Plan]:
    return lambda run_id, params: coord.plan_next(src, config(transform_params=params), run_id=run_id)


def interval_planner(coord, src) -> Callable[[str, Mapping[str, Any]], Plan]:
    def plan(run_id: str, params: Mapping[str, Any]) -> Plan:
        planner = IntervalPlanner(coord, config(transform_params=params), grace_ms=0, pool=2, clock=lambda: NOW)
        return planner.plan(src, INTERVAL, run_id).plan
    return plan


@pytest.fixture(params=[offsets_planner, interval_planner], ids=["offsets", "interval"])
def planner(request, tmp_path):
    """(coordinator, plan(run_id, transform params) -> the plan that run's plan task gets)."""
    coord, _, _ = world_coordinator(open_ledger_storage(str(tmp_path / "ledger")), clock=lambda: NOW)
    return coord, request.param(coord, source())


def test_a_retry_of_the_same_run_gets_its_plan_back_unchanged(planner):
    coord, plan = planner
    first = plan("run-1", {"day": "mon"})
    assert first.transform_params == {"day": "mon"}
    assert plan("run-1", {"day": "tue"}) == first  # a retry plans nothing, whatever it is given
    assert coord.latest_seq() == first.batch_seq


def test_another_run_replays_an_undecided_batch_with_its_transform_params(planner):
    coord, plan = planner
    first = plan("run-1", {"day": "mon"})
    replay = plan("run-2", {"day": "tue"})
    assert (replay.batch_seq, replay.replay_of, replay.ranges) == (first.batch_seq + 1, first.batch_seq, first.ranges)
    assert replay.transform_params == {"day": "mon"}


def test_a_replay_of_an_aborted_batch_keeps_its_transform_params_and_is_no_retry(planner):
    coord, plan = planner
    first = plan("run-1", {"day": "mon"})
    coord.rollback(first.batch_seq, "spark task failed")
    replay = plan("run-1", {"day": "tue"})  # the same run after the decision: a new batch, not a retry
    assert (replay.replay_of, replay.ranges, replay.transform_params) == (first.batch_seq, first.ranges, {"day": "mon"})
    coord.rollback(replay.batch_seq, "spark task failed again")
    again = plan("run-2", {"day": "wed"})
    assert (again.replay_of, again.transform_params) == (replay.batch_seq, {"day": "mon"})
