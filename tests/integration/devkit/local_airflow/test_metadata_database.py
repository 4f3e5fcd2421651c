"""Airflow's metadata databases on the dev kit's PostgreSQL: migrated once into a template, copied
per Airflow home, migrated again when another Airflow version meets the template."""

from __future__ import annotations

import sys
from pathlib import Path

from onceflow_devkit.local_airflow.metadata import MetadataDb
from onceflow_devkit.local_airflow.metadata_database import TEMPLATE, airflow_database, airflow_version


def _oid(server, database: str) -> int | None:
    with server.connect(autocommit=True) as conn:
        row = conn.execute("SELECT oid FROM pg_database WHERE datname = %s", (database,)).fetchone()
    return row[0] if row else None


def test_each_home_gets_a_migrated_copy_of_one_template(postgres_server, tmp_path):
    first = airflow_database(postgres_server, tmp_path / "a")
    template = _oid(postgres_server, TEMPLATE)
    second = airflow_database(postgres_server, tmp_path / "b")

    assert first != second
    assert airflow_database(postgres_server, tmp_path / "a") == first  # the same home, the same database
    assert _oid(postgres_server, TEMPLATE) == template  # migrated once
    for url in (first, second):  # Airflow's tables are there: a run can be looked up
        assert MetadataDb(url).last_run_pk("any_dag") == 0
    assert postgres_server.password not in repr(postgres_server)


def test_a_template_migrated_by_another_airflow_version_is_migrated_again(postgres_server, tmp_path):
    airflow_database(postgres_server, tmp_path / "a")
    with postgres_server.connect(autocommit=True) as conn:
        conn.execute(f"COMMENT ON DATABASE \"{TEMPLATE}\" IS 'airflow 2.10.0'")
    before = _oid(postgres_server, TEMPLATE)

    url = airflow_database(postgres_server, tmp_path / "c")

    assert _oid(postgres_server, TEMPLATE) != before
    with postgres_server.connect(autocommit=True) as conn:
        (comment,) = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                                  (TEMPLATE,)).fetchone()
    assert comment == f"airflow {airflow_version(Path(sys.executable))}"
    assert MetadataDb(url).last_run_pk("any_dag") == 0
