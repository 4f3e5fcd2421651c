"""``airflow dags test`` of the probe DAG: real tasks, a real effect, states read back."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from onceflow_devkit.local_airflow import AirflowHarnessError
from tests.integration.devkit.local_airflow.conftest import PROBE_HOST


def test_a_successful_run_has_its_effect_and_every_state(local_airflow, tmp_path):
    output = tmp_path / "effect.json"
    rollback = tmp_path / "rolled-back"
    result = local_airflow.dags_test(
        "harness_probe", conf={"output_path": str(output), "rollback_path": str(rollback), "rows": 7}
    )
    assert result.succeeded, result.describe()
    assert result.tasks == {"produce": "success", "write_effect": "success", "on_failure": "skipped"}
    # The XCom from produce reached write_effect, in the run Airflow recorded.
    assert json.loads(output.read_text()) == {"run_id": result.run_id, "rows": 7, "conn_host": PROBE_HOST}
    assert not rollback.exists()


def test_a_failed_run_exits_nonzero_and_its_one_failed_task_runs(local_airflow, tmp_path):
    output = tmp_path / "effect.json"
    rollback = tmp_path / "rolled-back"
    result = local_airflow.dags_test(
        "harness_probe",
        conf={"output_path": str(output), "rollback_path": str(rollback), "fail": "produce"},
        logical_date="2024-01-02T00:00:00+00:00",
    )
    assert result.returncode != 0, result.describe()
    assert result.run_state == "failed", result.describe()
    assert result.logical_date == datetime(2024, 1, 2, tzinfo=timezone.utc), result.describe()
    assert result.tasks == {"produce": "failed", "write_effect": "upstream_failed", "on_failure": "success"}
    assert rollback.read_text() == result.run_id
    assert not output.exists()
    assert "conf asked produce to fail" in result.log_file.read_text()


def test_an_unknown_dag_fails_fast_naming_the_dag_and_the_folder(local_airflow):
    with pytest.raises(AirflowHarnessError, match=r"'no_such_dag' defined by a file under .*tests/integration/devkit/local_airflow/dags"):
        local_airflow.dags_test("no_such_dag", timeout=120)
