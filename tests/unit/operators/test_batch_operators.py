"""The protocol tasks' own logic (the tasks in Airflow run in tests/system/e2e)."""

from __future__ import annotations

import pytest

from onceflow.operators.batch import CommitBatchOperator
from onceflow_examples.clickstream import CLICKSTREAM


class TaskInstance:
    def __init__(self, xcom):
        self.xcom = xcom

    def xcom_pull(self, task_ids):
        assert task_ids == "plan"
        return self.xcom


def operator():
    return CommitBatchOperator(task_id="commit", pipeline=CLICKSTREAM, warehouse="file:///tmp/w")


def test_a_commit_without_a_planned_batch_asks_to_clear_the_whole_run():
    with pytest.raises(RuntimeError, match="clear the whole run so that plan runs first"):
        operator().planned_seq({"ti": TaskInstance(None)})


def test_the_planned_batch_comes_from_the_plan_task():
    assert operator().planned_seq({"ti": TaskInstance({"batch_seq": 7, "batch_id": "0000000007"})}) == 7
