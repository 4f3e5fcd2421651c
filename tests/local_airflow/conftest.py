"""Fixtures of the local Airflow harness tests.

One migrated Airflow home for the whole folder (migrating costs 5-10 s);
``airflow_server`` starts its three processes once per module that uses it.
The test-only DAG lives in ``tests/local_airflow/dags/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from onceflow.local_airflow import LocalAirflow

DAGS = Path(__file__).resolve().parent / "dags"


@pytest.fixture(scope="session")
def local_airflow(tmp_path_factory) -> LocalAirflow:
    airflow = LocalAirflow(tmp_path_factory.mktemp("local-airflow"), DAGS)
    airflow.migrate()
    yield airflow
    airflow.stop(grace=2)


@pytest.fixture(scope="module")
def airflow_server(local_airflow: LocalAirflow) -> LocalAirflow:
    local_airflow.start(timeout=180)
    yield local_airflow
    local_airflow.stop(grace=2)
