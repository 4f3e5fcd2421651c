"""The offsets planner and the interval planner follow one set of rules when a
batch is planned again (``core.planning.reruns``): a retry of the same run
gets its plan back, and a replay keeps the transform parameters of the batch
it replays; and both fit a small batch's splits to its records. Each test runs
against both planners, on a local ledger."""

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


def offsets_planner(coord, src, **cfg) -> Callable[[str, Mapping[str, Any]], Plan]:
    return lambda run_id, params: coord.plan_next(src, config(transform_params=params, **cfg), run_id=run_id)


def interval_planner(coord, src, **cfg) -> Callable[[str, Mapping[str, Any]], Plan]:
    def plan(run_id: str, params: Mapping[str, Any]) -> Plan:
        planner = IntervalPlanner(coord, config(transform_params=params, **cfg), grace_ms=0, pool=2, clock=lambda: NOW)
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


@pytest.mark.parametrize("planner_of", [offsets_planner, interval_planner], ids=["offsets", "interval"])
@pytest.mark.parametrize("records_per_split, splits", [(None, 2), (70, 2), (100, 2), (140, 1), (1000, 1)])
def test_a_small_batch_writes_each_output_in_fewer_splits_and_its_replay_keeps_them(planner_of, records_per_split,
                                                                                     splits, tmp_path):
    # Both planners' first batch holds 140 records (100 + 40); the kafka sink allows 2 splits, the files sink 1.
    coord, _, _ = world_coordinator(open_ledger_storage(str(tmp_path / "ledger")), clock=lambda: NOW)
    plan = planner_of(coord, source(), records_per_split=records_per_split)
    first = plan("run-1", {})
    assert first.records == 140
    assert (first.sink("events").splits, first.sink("files").splits) == (splits, 1)
    # Only the ids of the splits the batch uses: those a rollback fences.
    assert first.sink("events").transactional_ids == tuple(f"onceflow-pipe-events-pool1-{i}" for i in range(splits))
    coord.rollback(first.batch_seq, "spark task failed")
    replay = plan("run-2", {})
    assert (replay.replay_of, replay.sink("events").splits) == (first.batch_seq, splits)
