"""What every Airflow subprocess is given, and settings that must fail fast (no Airflow started)."""

from __future__ import annotations

import json
import sys

import pytest

from onceflow_devkit.local_airflow import AirflowHarnessError, LocalAirflow


@pytest.fixture
def airflow(tmp_path) -> LocalAirflow:
    dags = tmp_path / "dags"
    dags.mkdir()
    return LocalAirflow(tmp_path / "home", dags)


def test_tasks_reach_the_execution_api_on_the_port_the_api_server_listens_on(airflow):
    env = airflow.env()
    port = env["AIRFLOW__API__PORT"]
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == f"http://127.0.0.1:{port}/execution/"
    assert airflow.api_url == f"http://127.0.0.1:{port}"


def test_environment_is_local_quiet_and_uses_this_venv(airflow):
    env = airflow.env()
    assert env["AIRFLOW_HOME"] == str(airflow.home)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{airflow.home}/airflow.db"
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert env["AIRFLOW__CORE__PARALLELISM"] == "4"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(airflow.dags_folder)
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] == "True"
    assert env["PYSPARK_PYTHON"] == sys.executable


def test_connections_become_json_env_vars_and_extra_env_wins(tmp_path):
    (tmp_path / "dags").mkdir()
    airflow = LocalAirflow(tmp_path / "home", tmp_path / "dags", extra_env={"AIRFLOW__CORE__PARALLELISM": "2"})
    airflow.set_connection("spark_local", {"conn_type": "spark", "host": "local[2]"})
    env = airflow.env()
    assert json.loads(env["AIRFLOW_CONN_SPARK_LOCAL"]) == {"conn_type": "spark", "host": "local[2]"}
    assert env["AIRFLOW__CORE__PARALLELISM"] == "2"


def test_the_callers_airflow_settings_do_not_leak_into_the_home(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", "/somewhere/else")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "False")
    monkeypatch.setenv("AIRFLOW_CONN_FROM_SHELL", '{"conn_type": "http"}')
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    (tmp_path / "dags").mkdir()
    env = LocalAirflow(tmp_path / "home", tmp_path / "dags").env()
    assert env["AIRFLOW_HOME"] == str((tmp_path / "home").resolve())
    assert "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION" not in env
    assert "AIRFLOW_CONN_FROM_SHELL" not in env
    # onceflow's own settings do reach the tasks.
    assert env["ONCEFLOW_KAFKA_BOOTSTRAP"] == "127.0.0.1:9092"


@pytest.mark.parametrize(
    "conn_id, conn, says",
    [
        ("spark-local", {"conn_type": "spark"}, "letters, digits and _"),
        ("spark_local", {"host": "local[2]"}, "needs a conn_type"),
    ],
)
def test_a_bad_connection_is_refused_with_the_fix(airflow, conn_id, conn, says):
    with pytest.raises(AirflowHarnessError, match=says):
        airflow.set_connection(conn_id, conn)


def test_a_missing_dags_folder_fails_fast_naming_it(tmp_path):
    with pytest.raises(AirflowHarnessError, match=f"dags folder {tmp_path / 'nope'} does not exist"):
        LocalAirflow(tmp_path / "home", tmp_path / "nope")


def test_every_process_of_a_home_gets_the_same_keys_kept_from_other_users(tmp_path):
    # Components started before airflow.cfg exists would each write keys of their own, and the
    # Execution API would refuse the scheduler's task tokens (a home on a migrated copy runs no migration).
    (tmp_path / "dags").mkdir()
    first = LocalAirflow(tmp_path / "home", tmp_path / "dags").env()
    again = LocalAirflow(tmp_path / "home", tmp_path / "dags").env()
    other = LocalAirflow(tmp_path / "other", tmp_path / "dags").env()

    keys = ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY", "AIRFLOW__CORE__FERNET_KEY")
    assert all(first[k] and first[k] == again[k] != other[k] for k in keys)
    assert len(first["AIRFLOW__API_AUTH__JWT_SECRET"]) >= 64  # PyJWT warns below 64 bytes for SHA512
    assert (tmp_path / "home" / "secrets.json").stat().st_mode & 0o777 == 0o600


def test_a_database_url_is_airflows_sync_and_async_metadata_database(tmp_path):
    (tmp_path / "dags").mkdir()
    url = "postgresql+psycopg://u:p@127.0.0.1:5432/airflow_x"
    env = LocalAirflow(tmp_path / "home", tmp_path / "dags", database=url).env()
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] == url
