"""The ``iceberg`` sink kind: Parquet data files written where the table will
reference them, committed as one table snapshot per batch (``onceflow.iceberg``)."""

from __future__ import annotations

import functools
import importlib.util
import json
from typing import Any, Mapping

# The Spark data source that pre-commits this kind (onceflow.spark.iceberg_sink registers it).
FORMAT = "onceflow_iceberg"


class IcebergKind:
    name = "iceberg"
    data_source = "onceflow.spark.iceberg_sink"

    def location(self, sink, warehouse: str) -> str:
        return sink.target  # the table identifier: its catalog knows where it lives

    def asset_uri(self, sink, warehouse: str) -> str:
        # The Asset names the table; a URI needs a host, and the catalog is a connection.
        return f"iceberg://{sink.catalog or 'catalog'}/{sink.target}"

    def transactional_ids(self, pipeline: str, sink, slot: int | None = None) -> tuple[str, ...]:
        return ()

    def reprocess(self, sink) -> str:
        return "replaced"  # one snapshot removes the replaced batch's files and adds the new ones

    def vote_lifetime(self, sink):
        return None  # written data files wait for the commit as long as it takes

    def open_transactions(self, sink, vote) -> list:
        return []

    def check(self, sink, deployment) -> None:
        from ..iceberg.tables import partition_fields

        what = f"sink {sink.name!r} (iceberg table {sink.target!r})"
        if importlib.util.find_spec("pyiceberg") is None:
            from ..settings import ConfigurationError

            raise ConfigurationError(f"{what}: pyiceberg is not installed where this task runs: install onceflow with "
                                     "its iceberg extra (pip install 'onceflow[iceberg]') on the Airflow workers and "
                                     "the Spark driver and executors")
        properties = deployment.catalog_properties(sink.catalog, what)
        partition_fields(sink.partition_by, what)
        if properties.get("snapshot-loading-mode") == "refs":
            from ..settings import ConfigurationError

            raise ConfigurationError(
                f"{what}: catalog {sink.catalog!r} sets snapshot-loading-mode=refs, which hides the snapshots a commit "
                "looks for its batch in (a repeated commit would append the batch again): remove the setting")

    def participant(self, pipeline, sink, deployment):
        from ..iceberg.sink import IcebergTableSink

        # Resolved when the participant is used, not built: `onceflow status` needs no catalog.
        properties = functools.partial(deployment.catalog_properties, sink.catalog, f"sink {sink.name!r}")
        return IcebergTableSink(sink.name, pipeline.name, sink.target, sink.catalog, properties)

    def pre_commit(self, frame: Any, sink, sink_plan, deployment, job_options: Mapping[str, str]) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        from ..iceberg.properties import public_properties
        from ..iceberg.tables import open_catalog, prepared_table

        what = f"sink {sink.name!r} (iceberg table {sink.target!r})"
        catalog = open_catalog(sink.catalog, deployment.catalog_properties(sink.catalog, what))
        table = prepared_table(catalog, sink.target, to_arrow_schema(frame.schema, timezone="UTC"), sink.partition_by, what)
        options = {**job_options, "table": sink.target, "catalog": sink.catalog, "metadata_location": table.metadata_location,
                   "io_properties": json.dumps(public_properties(table.io.properties))}
        frame.write.format(FORMAT).mode("append").options(**options).save()


ICEBERG = IcebergKind()
