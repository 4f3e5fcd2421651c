"""The protocol tasks' own logic (the tasks in Airflow run in tests/system/e2e)."""

from __future__ import annotations

import pytest

from onceflow.airflow.deployed import PLAN_XCOM_KEY
from onceflow.airflow.operators.batch import CommitBatchOperator
from tests.doubles.specs import ORDERS


class TaskInstance:
    def __init__(self, xcom):
        self.xcom = xcom

    def xcom_pull(self, task_ids, key):
        assert (task_ids, key) == ("plan", PLAN_XCOM_KEY)
        return self.xcom


CONTEXT = {"ti": type("TI", (), {"dag_id": "orders"})()}


def operator():
    return CommitBatchOperator(task_id="commit", pipeline=ORDERS, warehouse="file:///tmp/w")


def test_a_commit_without_a_planned_batch_asks_to_clear_the_whole_run():
    with pytest.raises(RuntimeError, match="clear the whole run so that plan runs first"):
        operator().steps(CONTEXT).planned_seq({"ti": TaskInstance(None)})


def test_the_planned_batch_comes_from_the_plan_task():
    assert operator().steps(CONTEXT).planned_seq({"ti": TaskInstance({"batch_seq": 7, "batch_id": "0000000007"})}) == 7


def test_an_interval_run_reads_its_data_interval_and_a_run_without_one_fails_saying_why():
    from datetime import datetime, timezone

    from airflow.sdk.exceptions import AirflowFailException

    from onceflow.airflow.operators.steps import run_interval
    from onceflow.core.planning.intervals import Interval

    start, end = datetime(2026, 11, 1, 3, tzinfo=timezone.utc), datetime(2026, 11, 1, 4, tzinfo=timezone.utc)
    context = {"run_id": "backfill__2026-11-01T03:00:00+00:00", "data_interval_start": start, "data_interval_end": end}
    assert run_interval("orders", context) == Interval(1_793_502_000_000, 1_793_505_600_000)
    assert str(run_interval("orders", context)) == "2026-11-01T03:00:00Z/2026-11-01T04:00:00Z"
    with pytest.raises(AirflowFailException, match=r"run manual__1 has none .* a schedule with data intervals"):
        run_interval("orders", {"run_id": "manual__1", "data_interval_start": start, "data_interval_end": start})


def test_a_run_refused_at_plan_leaves_its_rollback_green_even_when_it_asked_for_faults(monkeypatch):
    """The plan task refused the run (here: a faults param on workers without fault injection), so no
    batch was planned; the rollback has nothing to undo and must not fail on the same conf."""
    from types import SimpleNamespace

    from onceflow.airflow.operators.batch import RollbackBatchOperator
    from onceflow.core import faults

    monkeypatch.delenv(faults.RUN_PARAM_GUARD, raising=False)
    ti = SimpleNamespace(dag_id="orders", run_id="manual__1", task_id="rollback", try_number=1,
                         xcom_pull=TaskInstance(None).xcom_pull)
    rollback = RollbackBatchOperator(task_id="rollback", pipeline=ORDERS, warehouse="file:///tmp/w")
    context = {"ti": ti, "run_id": "manual__1", "params": {faults.RUN_PARAM: "commit.effect.before=crash"}}

    assert rollback.execute(context) == {"state": "nothing planned"}
    assert not faults.armed()


@pytest.mark.parametrize(("plan_task_id", "found", "rolled_back"), [
    ("spark", "preparing", 4),   # planned by a spark task try whose XCom a later try cleared
    ("spark", "aborted", None),  # already decided: nothing left to roll back
    ("spark", None, None),       # refused before planning
    ("plan", "preparing", None),  # the plan task's XCom outlives the spark task's tries: empty means none
])
def test_without_the_plan_in_xcom_a_rollback_finds_the_run_s_undecided_batch_in_the_ledger_only_where_the_spark_task_plans(
        monkeypatch, plan_task_id, found, rolled_back):
    from types import SimpleNamespace

    from onceflow.airflow.deployed import DeployedPipeline
    from onceflow.airflow.operators.batch import RollbackBatchOperator
    from onceflow.core.states import BatchState

    asked = []

    class Ledger:
        def batch_of_run(self, run_id):
            asked.append(run_id)
            return None if found is None else SimpleNamespace(state=BatchState(found), batch_seq=4, batch_id="0000000004")

    monkeypatch.setattr(DeployedPipeline, "runtime", lambda self, identity=None: Ledger())
    rollback = RollbackBatchOperator(task_id="rollback", pipeline=ORDERS, warehouse="file:///tmp/w", plan_task_id=plan_task_id)
    ti = SimpleNamespace(dag_id="orders", run_id="manual__1", task_id="rollback", try_number=1)
    assert rollback.batch_without_xcom({"ti": ti, "run_id": "manual__1"}) == rolled_back
    assert asked == ([] if plan_task_id == "plan" else ["manual__1"])
