"""api-server + scheduler + dag-processor, driven over the REST API like a user would.

The tests share one started Airflow (module fixture); the last one stops it,
so keep it last.
"""

from __future__ import annotations

import json

from onceflow_devkit.local_airflow import LocalAirflow
from onceflow_devkit.services.process import port_is_free
from tests.integration.devkit.local_airflow.conftest import PROBE_HOST

DAG = "harness_probe"


def test_a_run_triggered_over_rest_with_conf_succeeds_and_has_its_effect(airflow_server, tmp_path):
    output = tmp_path / "effect.json"
    with airflow_server.api() as api:
        assert api.wait_for_dag(DAG, timeout=60)["dag_id"] == DAG
        api.unpause(DAG)
        run_id = api.trigger(DAG, conf={"output_path": str(output), "rows": 5})
        assert api.wait_for_run(DAG, run_id, timeout=120) == "success", api.task_states(DAG, run_id)
        assert api.task_states(DAG, run_id) == {
            "produce": "success",
            "write_effect": "success",
            "on_failure": "skipped",
        }
    assert json.loads(output.read_text()) == {"run_id": run_id, "rows": 5, "conn_host": PROBE_HOST}
    # The metadata DB, read directly, agrees with the API.
    states = airflow_server.run_states(DAG, run_id)
    assert states.state == "success" and states.tasks["write_effect"] == "success"


def test_a_failed_rest_run_runs_its_one_failed_task_says_why_and_succeeds_once_cleared(airflow_server, tmp_path):
    output, rollback, heal = tmp_path / "effect.json", tmp_path / "rolled-back", tmp_path / "healed"
    conf = {"output_path": str(output), "rollback_path": str(rollback), "fail": "produce", "heal_path": str(heal)}
    with airflow_server.api() as api:
        api.wait_for_dag(DAG, timeout=60)
        api.unpause(DAG)
        run_id = api.trigger(DAG, conf=conf)
        assert api.wait_for_run(DAG, run_id, timeout=120) == "failed"
        assert api.task_states(DAG, run_id) == {
            "produce": "failed",
            "write_effect": "upstream_failed",
            "on_failure": "success",
        }
        assert rollback.read_text() == run_id
        explanation = api.explain(DAG, run_id)
        assert "produce=failed" in explanation
        assert "RuntimeError: harness_probe: conf asked produce to fail" in explanation
        assert not output.exists()
        # Fix the cause, clear the failed tasks: the same run (same conf) now succeeds.
        heal.touch()
        api.clear_run(DAG, run_id, only_failed=True)
        assert api.wait_for_run(DAG, run_id, timeout=120) == "success", api.explain(DAG, run_id)
        assert api.task_states(DAG, run_id) == {
            "produce": "success",
            "write_effect": "success",
            "on_failure": "success",
        }
    assert json.loads(output.read_text()) == {"run_id": run_id, "rows": 3, "conn_host": PROBE_HOST}


def test_another_instance_finds_the_servers_and_its_stop_leaves_no_process_behind(airflow_server):
    before = airflow_server.processes()
    # The three components and what they forked (LocalExecutor workers, log server, uvicorn).
    assert len(before) > 3, before
    # A second instance on the same home (another command, a later session)
    # recognises the running servers although Airflow renamed its processes.
    again = LocalAirflow(airflow_server.home, airflow_server.dags_folder)
    assert again.is_running()
    assert again.api_port == airflow_server.api_port
    with again.api() as api:
        assert api.health()["scheduler"]["status"] == "healthy"
    again.stop(grace=3)
    assert again.processes() == [] and airflow_server.processes() == []
    assert not airflow_server.is_running()
    alive = [pid for pid in before if _alive(pid)]
    assert alive == [], f"still running after stop(): {alive}"
    assert port_is_free(airflow_server.api_port) and port_is_free(airflow_server.log_server_port)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False
