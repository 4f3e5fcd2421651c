"""Fixtures of the local Airflow harness tests.

One migrated Airflow home per test session (migrating costs 5-10 s), under
``.onceflow/test/local-airflow/session-<pid>/``; ``airflow_server`` starts
its three processes once per module that uses it. A session that was killed
leaves its home behind: the next session stops whatever still runs from it
(the scheduler's children outlive a SIGKILLed caller) and removes it.
The test-only DAG lives in ``tests/integration/devkit/local_airflow/dags/``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from onceflow_devkit.local_airflow import LocalAirflow

DAGS = Path(__file__).resolve().parent / "dags"
PROBE_HOST = "probe-host.invalid"
HOMES = Path(__file__).resolve().parents[2] / ".onceflow" / "test" / "local-airflow"


def _remove_dead_sessions() -> None:
    for leftover in HOMES.glob("session-*"):
        pid = int(leftover.name.split("-", 1)[1])
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            for home in (p for p in leftover.iterdir() if p.is_dir()):
                LocalAirflow(home, DAGS).stop(grace=0)
            shutil.rmtree(leftover, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_homes() -> Path:
    """A directory for Airflow homes that the next session cleans up if this one is killed."""
    _remove_dead_sessions()
    root = HOMES / f"session-{os.getpid()}"
    root.mkdir(parents=True, exist_ok=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def local_airflow(airflow_homes: Path) -> LocalAirflow:
    airflow = LocalAirflow(airflow_homes / "shared", DAGS)
    airflow.set_connection("harness_probe", {"conn_type": "generic", "host": PROBE_HOST})
    airflow.migrate()
    yield airflow
    airflow.stop(grace=2)


@pytest.fixture(scope="module")
def airflow_server(local_airflow: LocalAirflow) -> LocalAirflow:
    local_airflow.start(timeout=180)
    yield local_airflow
    local_airflow.stop(grace=2)
