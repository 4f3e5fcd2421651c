"""A tiny DAG that proves the local Airflow harness runs real tasks.

Shaped like a onceflow batch (docs/protocol.md, "One batch")::

    produce ──► write_effect      (all_success, like commit)
         └────► on_failure        (one_failed, like rollback)

``produce`` pushes an XCom (with the host of connection ``harness_probe``,
which the tests define as an ``AIRFLOW_CONN_`` variable); ``write_effect`` writes it, with the run id, to
``dag_run.conf["output_path"]`` (the effect the tests check). ``on_failure``
writes ``conf["rollback_path"]``. ``conf["fail"]`` names a task that must
raise, until the file ``conf["heal_path"]`` exists (so a cleared run can
succeed). Both branches are leaves on purpose: Airflow derives a run's state
from its leaves, so a rollback downstream of the commit would turn a failed
run into a "success".
"""

from __future__ import annotations

import json
from pathlib import Path

import pendulum
from airflow.sdk import Connection, dag, get_current_context, task


def _conf() -> dict:
    return get_current_context()["dag_run"].conf or {}


def _fail_if_asked(task_id: str) -> None:
    heal = _conf().get("heal_path")
    if _conf().get("fail") == task_id and not (heal and Path(heal).exists()):
        raise RuntimeError(f"harness_probe: conf asked {task_id} to fail")


@dag(
    dag_id="harness_probe",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["onceflow-tests"],
)
def harness_probe():
    @task
    def produce() -> dict:
        _fail_if_asked("produce")
        return {"rows": int(_conf().get("rows", 3)), "conn_host": Connection.get("harness_probe").host}

    @task
    def write_effect(payload: dict) -> str:
        _fail_if_asked("write_effect")
        context = get_current_context()
        path = Path(_conf()["output_path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"run_id": context["run_id"], **payload}))
        return str(path)

    @task(trigger_rule="one_failed")
    def on_failure() -> None:
        path = _conf().get("rollback_path")
        if path:
            Path(path).write_text(get_current_context()["run_id"])

    produced = produce()
    write_effect(produced)
    produced >> on_failure()


harness_probe()
