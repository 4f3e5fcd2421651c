"""Airflow's metadata database on the dev kit's PostgreSQL: one database per Airflow home.

Production Airflow keeps its metadata in PostgreSQL (or MySQL), and so does
the dev kit: SQLite locks the whole file while the scheduler writes, which
made the API refuse backfills (HTTP 503) and ran code paths no user runs.

``airflow db migrate`` runs once per server, into a template database
(``airflow_template``, its comment naming the Airflow version that migrated
it); each home's database is a copy of it (``CREATE DATABASE ... TEMPLATE``,
milliseconds). Runs in the calling process (a test, ``onceflow demo``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from onceflow_devkit.local_airflow.errors import AirflowHarnessError
from onceflow_devkit.services.postgres import PostgresServer

TEMPLATE = "airflow_template"
# pg_advisory_lock key: one process at a time creates the template or a copy (the demo beside a test).
_LOCK = 0x0AF10
# What the dev kit says where its Airflow runs without PostgreSQL.
SQLITE_FALLBACK = ("Airflow's metadata database is SQLite in the Airflow home: no PostgreSQL server was given "
                   "(install Debian's postgresql package; the dev kit starts its own server)")


def database_url(server: PostgresServer, database: str) -> str:
    """SQLAlchemy URL of ``database`` through psycopg 3 (sync and async). It holds the password:
    it goes into the Airflow processes' environment, never onto a command line."""
    return f"postgresql+psycopg://{server.user}:{server.password}@{server.host}:{server.port}/{database}"


def database_name(home: Path) -> str:
    """The database of the Airflow home at ``home``: the same home always gets the same one."""
    return "airflow_" + hashlib.sha256(str(Path(home).resolve()).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def airflow_version(python: Path) -> str:
    done = subprocess.run([str(python), "-c", "import airflow; print(airflow.__version__)"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AirflowHarnessError(f"{python} cannot import airflow: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def _migrate_template(server: PostgresServer, python: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_")}
    url = database_url(server, TEMPLATE)
    with tempfile.TemporaryDirectory(prefix="airflow-template-") as home:
        env.update({"AIRFLOW_HOME": home, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
                    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": url, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
        done = subprocess.run([str(Path(python).parent / "airflow"), "db", "migrate"], env=env,
                              capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise AirflowHarnessError(f"`airflow db migrate` of {TEMPLATE} on {server.host}:{server.port} failed "
                                  f"({done.returncode}): {(done.stdout + done.stderr).strip()[-2000:]}")


def airflow_database(server: PostgresServer, home: Path, python: Path = Path(sys.executable)) -> str:
    """The SQLAlchemy URL of the migrated metadata database of the Airflow home at ``home``,
    copied from the template when it does not exist yet."""
    name = database_name(home)
    version = airflow_version(python)
    with server.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK,))
        try:
            comment = conn.execute(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", (TEMPLATE,)
            ).fetchone()
            if comment is None or comment[0] != f"airflow {version}":
                # Missing, half-migrated (no comment yet) or migrated by another Airflow version.
                conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
                _migrate_template(server, python)
                conn.execute(f"COMMENT ON DATABASE \"{TEMPLATE}\" IS 'airflow {version}'")
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK,))
    return database_url(server, name)
