"""The rules both planners follow when a batch is planned again.

The offsets planner (``offsets.next_plan``, through ``Coordinator.plan_next``)
and the interval planner (``interval_planner.IntervalPlanner``) apply them alike:

- a retry of the same run: the plan task that wrote the latest plan runs again
  (an Airflow retry) before that batch is decided; it gets that plan back,
  unchanged, and plans nothing (I6);
- a replay: the next batch re-reads an aborted batch's ranges (I6) and keeps
  that batch's transform parameters, not the replaying run's, so that it
  reproduces the aborted batch's input and how it was transformed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from onceflow.core.plan import Plan

if TYPE_CHECKING:
    from onceflow.core.ledger.ledger import BatchLedger


def is_retry(latest: Plan, run_id: str | None, ledger: BatchLedger) -> bool:
    """``latest`` was planned by run ``run_id`` and is not decided yet: this is a retry of its plan task."""
    return run_id is not None and latest.run_id == run_id and ledger.read_decision(latest.batch_seq) is None


def transform_params(run_params: Mapping[str, Any], replayed: Plan | None) -> dict[str, Any]:
    """The next plan's transform parameters: those of the batch it replays, if it replays one; else this run's."""
    return dict(replayed.transform_params if replayed is not None else run_params)
