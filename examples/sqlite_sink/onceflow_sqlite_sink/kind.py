"""Kind ``sqlite``: the seven members a kind must define (onceflow.sinks.api.SinkKind), and ``check_options``."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing

from onceflow.sinks.api import BatchId, CommittedOutput, ConfigurationError, SinkKind, refuse_options

from .table import BATCH_COLUMN, SqliteTableSink, create_tables, q

DATABASE = "database"  # the one option: the database file's absolute path
FORMAT = "onceflow_sqlite"  # the Spark data source (data_source.py) registers under this name


class SqliteKind(SinkKind):
    name = "sqlite"
    data_source = "onceflow_sqlite_sink.data_source"

    def check_options(self, sink) -> None:
        refuse_options(sink, takes=(DATABASE,))
        if not os.path.isabs(sink.options.get(DATABASE, "")):
            raise ConfigurationError(f"sink {sink.name!r}: option {DATABASE!r} must be the absolute path of the SQLite "
                                     f"database file, got {sink.options.get(DATABASE)!r}")

    def location(self, sink, warehouse: str) -> str:
        return f"{sink.options[DATABASE]}#{sink.target}"

    def asset_uri(self, sink, warehouse: str) -> str:
        return f"x-onceflow-sqlite://localhost{sink.options[DATABASE]}#{sink.target}"

    def participant(self, pipeline, sink, deployment) -> SqliteTableSink:
        return SqliteTableSink(sink.name, pipeline.name, sink.options[DATABASE], sink.target)

    def pre_commit(self, frame, sink, sink_plan, deployment, job_options) -> None:
        create_tables(sink.options[DATABASE], sink.target, frame.columns)
        options = {**job_options, DATABASE: sink.options[DATABASE], "table": sink.target,
                   "batch_id": str(BatchId(int(job_options["batch_seq"])))}
        frame.write.format(FORMAT).mode("append").options(**options).save()

    def committed_output(self, spark, sink, pipeline, deployment, scope) -> CommittedOutput:
        from pyspark.sql.types import StringType, StructField, StructType

        columns = ", ".join(q(f.name) for f in [*scope.schema.fields, StructField(BATCH_COLUMN, StringType())])
        with closing(sqlite3.connect(sink.options[DATABASE])) as conn:
            rows = [r for r in conn.execute(f"SELECT {columns} FROM {q(sink.target)}") if scope.covers(r[-1])]
        schema = StructType([*scope.schema.fields, StructField("batch", StringType())])
        return CommittedOutput(spark.createDataFrame(rows, schema) if rows else None, (),
                               f"table {sink.target} of {sink.options[DATABASE]}, rows by their {BATCH_COLUMN} column")


SQLITE = SqliteKind()
