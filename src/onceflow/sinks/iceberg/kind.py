"""The ``iceberg`` sink kind: Parquet data files written where the table will
reference them, committed as one table snapshot per batch (``onceflow.sinks.iceberg``)."""

from __future__ import annotations

import functools
import importlib.util
import json
from typing import Any, Mapping

from onceflow.sinks.api import SinkKind, CommittedOutput, committed_parquet
from onceflow.config.iceberg_catalogs import public_properties
from onceflow.config.settings import ConfigurationError
from onceflow.sinks.iceberg.participant import BATCH_KEY, IcebergTableSink, PIPELINE_KEY, SINK_KEY
from onceflow.sinks.iceberg.tables import open_catalog, partition_fields, prepared_table

# The Spark data source that pre-commits this kind (onceflow.sinks.iceberg.data_source registers it).
FORMAT = "onceflow_iceberg"


class IcebergKind(SinkKind):
    name = "iceberg"
    data_source = "onceflow.sinks.iceberg.data_source"
    fields = ("catalog", "partition_by")

    def location(self, sink, warehouse: str) -> str:
        return sink.target  # the table identifier: its catalog knows where it lives

    def asset_uri(self, sink, warehouse: str) -> str:
        # The Asset names the table; a URI needs a host, and the catalog is a connection.
        return f"iceberg://{sink.catalog or 'catalog'}/{sink.target}"

    def reprocess(self, sink) -> str:
        return "replaced"  # one snapshot removes the replaced batch's files and adds the new ones

    def vote_lifetime(self, sink):
        return None  # written data files wait for the commit as long as it takes

    def check(self, sink, deployment) -> None:
        what = f"sink {sink.name!r} (iceberg table {sink.target!r})"
        if importlib.util.find_spec("pyiceberg") is None:
            raise ConfigurationError(f"{what}: pyiceberg is not installed where this task runs: install onceflow with "
                                     "its iceberg extra (pip install 'onceflow[iceberg]') on the Airflow workers and "
                                     "the Spark driver and executors")
        properties = deployment.catalog_properties(sink.catalog, what)
        partition_fields(sink.partition_by, what)
        if properties.get("snapshot-loading-mode") == "refs":
            raise ConfigurationError(
                f"{what}: catalog {sink.catalog!r} sets snapshot-loading-mode=refs, which hides the snapshots a commit "
                "looks for its batch in (a repeated commit would append the batch again): remove the setting")

    def participant(self, pipeline, sink, deployment):
        # Resolved when the participant is used, not built: `onceflow status` needs no catalog.
        properties = functools.partial(deployment.catalog_properties, sink.catalog, f"sink {sink.name!r}")
        return IcebergTableSink(sink.name, pipeline.name, sink.target, sink.catalog, properties)

    def pre_commit(self, frame: Any, sink, sink_plan, deployment, job_options: Mapping[str, str]) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        what = f"sink {sink.name!r} (iceberg table {sink.target!r})"
        catalog = open_catalog(sink.catalog, deployment.catalog_properties(sink.catalog, what))
        table = prepared_table(catalog, sink.target, to_arrow_schema(frame.schema, timezone="UTC"), sink.partition_by, what)
        options = {**job_options, "table": sink.target, "catalog": sink.catalog, "metadata_location": table.metadata_location,
                   "io_properties": json.dumps(public_properties(table.io.properties))}
        frame.write.format(FORMAT).mode("append").options(**options).save()

    def committed_output(self, spark, sink, pipeline, deployment, scope):
        """The table's current snapshot as any engine reads it: each live data file by the batch
        the summary of the snapshot that added it names."""
        from pyiceberg.exceptions import NoSuchTableError

        what = f"sink {sink.name!r} (iceberg table {sink.target!r})"
        catalog = open_catalog(sink.catalog, deployment.catalog_properties(sink.catalog, what))
        reading = f"table {sink.target}'s current snapshot, each data file by the snapshot that added it"
        try:
            table = catalog.load_table(sink.target)
        except NoSuchTableError:
            return CommittedOutput(None, (), reading + " (there is no table yet)")
        summaries = {s.snapshot_id: s.summary for s in table.metadata.snapshots}
        files, foreign, deletes = [], 0, 0
        entries = table.inspect.entries().to_pylist() if table.current_snapshot() is not None else []
        for entry in (e for e in entries if e["status"] != 2):  # 2: DELETED, no longer in the table
            if entry["data_file"]["content"] != 0:  # row-level deletes would hide rows the files still hold
                deletes += 1
                continue
            summary = summaries.get(entry["snapshot_id"])
            if summary is None or (summary[PIPELINE_KEY], summary[SINK_KEY]) != (pipeline.name, sink.name):
                foreign += 1
                continue
            if scope.covers(summary[BATCH_KEY]):
                files.append([entry["data_file"]["file_path"], summary[BATCH_KEY]])
        findings = [f"table {sink.target}: {foreign} data file(s) added by snapshots of no batch of this output "
                    "(another writer, or a rewrite such as compaction): their rows cannot be told apart"] if foreign else []
        findings += [f"table {sink.target}: {deletes} delete file(s): rows were deleted or updated "
                     "after their batches committed"] if deletes else []
        options = {"io_properties": json.dumps(public_properties(table.io.properties)), "catalog": sink.catalog or "",
                   "table": sink.target, "deployment": deployment.to_option()}
        frame = committed_parquet(spark, files, scope.schema, options) if files else None
        return CommittedOutput(frame, tuple(findings), reading)


ICEBERG = IcebergKind()
