"""The tables a postgres sink writes, and what it asks PostgreSQL about prepared transactions.

Every row carries the batch that wrote it (``onceflow_batch``), so any reader
can tell batches apart. Each split's transaction also writes one marker row,
keyed by its prepared transaction's id: once that transaction is gone from
``pg_prepared_xacts``, the marker alone tells a commit from a rollback (an
unknown id proves neither).
"""

from __future__ import annotations

from typing import Iterable

from psycopg import sql

from onceflow.sinks.api import ConfigurationError

BATCH_COLUMN = "onceflow_batch"
MARKERS = "onceflow_prepared_splits"
# Spark SQL types (simpleString) and the PostgreSQL column each becomes in a table the sink creates.
COLUMN_TYPES = {
    "string": "text", "bigint": "bigint", "int": "integer", "smallint": "smallint", "tinyint": "smallint",
    "double": "double precision", "float": "real", "boolean": "boolean", "timestamp": "timestamptz",
    "timestamp_ntz": "timestamp", "date": "date", "binary": "bytea",
}


def split_target(target: str) -> tuple[str, str]:
    """``schema.table`` (or ``table``, in schema public) as (schema, table)."""
    schema, _, table = target.rpartition(".")
    return schema or "public", table


def table_sql(target: str) -> sql.Identifier:
    return sql.Identifier(*split_target(target))


def markers_sql(target: str) -> sql.Identifier:
    return sql.Identifier(split_target(target)[0], MARKERS)


def column_type(name: str, spark_type: str) -> str:
    if spark_type.startswith("decimal"):
        return spark_type.replace("decimal", "numeric")
    if spark_type not in COLUMN_TYPES:
        raise ConfigurationError(f"column {name!r} is of Spark type {spark_type}, which a postgres sink does not "
                                 f"create a column for (it takes {', '.join(sorted(COLUMN_TYPES))}, decimal): cast it "
                                 "in the transform, or create the table yourself")
    return COLUMN_TYPES[spark_type]


def create_tables(conn, target: str, columns: Iterable[tuple[str, str]]) -> None:
    """The output table (``columns``: name, Spark type; if it does not exist) and the markers table.
    Run once, before the executors write: concurrent CREATE TABLE IF NOT EXISTS may collide."""
    definitions = [sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(column_type(name, kind)))
                   for name, kind in columns]
    definitions.append(sql.SQL("{} text NOT NULL").format(sql.Identifier(BATCH_COLUMN)))
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(table_sql(target), sql.SQL(", ").join(definitions)))
    conn.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (gid text PRIMARY KEY, pipeline text NOT NULL, sink text NOT NULL, "
        "batch_seq bigint NOT NULL, split integer NOT NULL, attempt integer NOT NULL, rows bigint NOT NULL, "
        "prepared_at timestamptz NOT NULL DEFAULT now())").format(markers_sql(target)))


def prepared(conn, prefix: str) -> list[str]:
    """The ids of this database's prepared transactions that start with ``prefix`` (pg_prepared_xacts
    lists the whole server's; COMMIT PREPARED works only in the database of the transaction)."""
    return sorted(x.gtrid for x in conn.tpc_recover() if x.gtrid.startswith(prefix) and x.database == conn.info.dbname)


def committed(conn, target: str, gids: Iterable[str]) -> set[str]:
    """Which of ``gids`` committed: their marker rows are visible."""
    rows = conn.execute(sql.SQL("SELECT gid FROM {} WHERE gid = ANY(%s)").format(markers_sql(target)), [list(gids)])
    return {gid for (gid,) in rows}
