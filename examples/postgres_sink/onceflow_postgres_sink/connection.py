"""A sink's Airflow connection, where its code runs: never as an option, which Spark shows in plans.

Airflow workers resolve it as Airflow does (``AIRFLOW_CONN_<ID>``, then its
secrets backends and database); Spark executors have no Airflow and read
``AIRFLOW_CONN_<ID>`` alone. Give them the URI without its password, and the
password as ``PGPASSWORD`` (or a ``PGPASSFILE``), which libpq reads itself:
``spark.executorEnv.PGPASSWORD`` is hidden by Spark's default redaction, a
password inside the URI is not. The connection's extra (``sslmode``,
``sslrootcert``...) becomes the URI's query.
"""

from __future__ import annotations

import json
import os
from urllib.parse import quote, urlencode

from onceflow.sinks.api import ConfigurationError

CONNECTION_TYPE = "postgres"


def env_var(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def conninfo(conn_id: str) -> str:
    """A libpq connection URI for ``conn_id`` (it holds the password: never log it)."""
    raw = os.environ.get(env_var(conn_id))
    if raw:
        return _from_json(raw) if raw.lstrip().startswith("{") else raw
    try:
        from airflow.sdk import BaseHook
    except ImportError:
        raise ConfigurationError(
            f"connection {conn_id!r}: {env_var(conn_id)} is not set where this runs (a Spark executor has no Airflow "
            f"to ask): give the executors {env_var(conn_id)}=postgresql://user@host:port/database and PGPASSWORD "
            "through spark.executorEnv or their environment") from None
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # Airflow's own "not defined" error class moved between releases
        raise ConfigurationError(f"connection {conn_id!r} is not defined in Airflow ({exc}): create it "
                                 f"(type {CONNECTION_TYPE}) or set {env_var(conn_id)}") from None
    return _uri(conn.host, conn.port, conn.login, conn.password, conn.schema, conn.extra_dejson)


def _from_json(raw: str) -> str:
    fields = json.loads(raw)
    extra = fields.get("extra") or {}
    return _uri(fields.get("host"), fields.get("port"), fields.get("login"), fields.get("password"), fields.get("schema"),
                json.loads(extra) if isinstance(extra, str) else extra)


def _uri(host, port, login, password, database, extra=None) -> str:
    credentials = quote(login or "", safe="") + (":" + quote(password, safe="") if password else "")
    query = ("?" + urlencode({k: str(v) for k, v in sorted(extra.items())})) if extra else ""
    return f"postgresql://{credentials}@{host or 'localhost'}:{port or 5432}/{quote(database or 'postgres', safe='')}{query}"


def connect(conn_id: str, **kwargs):
    import psycopg

    return psycopg.connect(conninfo(conn_id), **kwargs)
