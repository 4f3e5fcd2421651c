"""Kind ``postgres``: the contract's members (onceflow.sinks.api.SinkKind), each where it runs."""

from __future__ import annotations

from typing import Any, Mapping

from onceflow.sinks.api import AuditScope, BatchId, CommittedOutput, ConfigurationError, SinkKind, refuse_options

from .connection import CONNECTION_TYPE

CONNECTION_OPTION = "connection"
FORMAT = "onceflow_postgres"  # the Spark data source (data_source.py) registers under this name


class PostgresKind(SinkKind):
    name = "postgres"
    data_source = "onceflow_postgres_sink.data_source"

    def check_options(self, sink) -> None:
        refuse_options(sink, takes=(CONNECTION_OPTION,))
        if not sink.options.get(CONNECTION_OPTION):
            raise ConfigurationError(f"sink {sink.name!r}: a postgres sink needs option {CONNECTION_OPTION!r}: the id "
                                     f"of an Airflow connection of type {CONNECTION_TYPE} to the table's database")

    def location(self, sink, warehouse: str) -> str:
        return sink.target

    def asset_uri(self, sink, warehouse: str) -> str:
        # Not postgres://: with the postgres provider installed, Airflow would demand host, port and
        # database, which DAG parsing does not read from the connection. x- schemes are Airflow's for others.
        from .tables import split_target

        schema, table = split_target(sink.target)
        return f"x-onceflow-postgres://{sink.options[CONNECTION_OPTION]}/{schema}/{table}"

    def check(self, sink, deployment) -> None:
        """Two-phase commit needs ``max_prepared_transactions`` > 0 on the server (its default is 0)."""
        from .connection import connect

        with connect(sink.options[CONNECTION_OPTION], autocommit=True, connect_timeout=10) as conn:
            limit = int(conn.execute("SHOW max_prepared_transactions").fetchone()[0])
        if limit < sink.splits:
            raise ConfigurationError(
                f"sink {sink.name!r}: the server of connection {sink.options[CONNECTION_OPTION]!r} allows "
                f"max_prepared_transactions={limit}, fewer than the sink's {sink.splits} splits: raise it in "
                "postgresql.conf (a restart is needed) to at least the splits of every batch in flight")

    def participant(self, pipeline, sink, deployment):
        from .participant import PostgresTableSink

        return PostgresTableSink(sink.name, pipeline.name, sink.target, sink.options[CONNECTION_OPTION])

    def pre_commit(self, frame: Any, sink, sink_plan, deployment, job_options: Mapping[str, str]) -> None:
        from .connection import connect
        from .tables import create_tables

        with connect(sink.options[CONNECTION_OPTION], autocommit=True) as conn:
            create_tables(conn, sink.target, [(f.name, f.dataType.simpleString()) for f in frame.schema.fields])
        options = {**job_options, "table": sink.target, CONNECTION_OPTION: sink.options[CONNECTION_OPTION],
                   "batch_id": str(BatchId(int(job_options["batch_seq"])))}
        frame.write.format(FORMAT).mode("append").options(**options).save()

    def committed_output(self, spark, sink, pipeline, deployment, scope: AuditScope) -> CommittedOutput:
        """The table as any reader sees it (committed rows only), each row by its ``onceflow_batch``."""
        from psycopg import sql
        from pyspark.sql.types import StringType, StructField, StructType

        from .connection import connect
        from .tables import BATCH_COLUMN, table_sql

        columns = [f.name for f in scope.schema.fields]
        query = sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, [*columns, BATCH_COLUMN])), table_sql(sink.target))
        with connect(sink.options[CONNECTION_OPTION], autocommit=True) as conn:
            rows = [r for r in conn.execute(query) if scope.covers(r[-1])]
        schema = StructType([*scope.schema.fields, StructField("batch", StringType())])
        return CommittedOutput(spark.createDataFrame(rows, schema) if rows else None, (),
                               f"table {sink.target} as any reader sees it, rows by their {BATCH_COLUMN} column")


POSTGRES = PostgresKind()
