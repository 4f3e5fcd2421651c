"""The dev kit's Iceberg catalogs, as the properties the connection ``onceflow_iceberg`` carries.

Two kinds, chosen by the caller:

- **REST** (``rest=``): the dev kit's REST catalog server (``services.rest_catalog``), what users
  run in production (Polaris, Nessie, Lakekeeper, Glue's or Unity's REST endpoints); a local
  warehouse.
- **SQL**: pyiceberg's SQL catalog on a local SQLite file, its tables under the warehouse
  (``<warehouse>/iceberg``), on the local filesystem or the embedded S3. Nothing is a server: the
  catalog is the SQLite file, which every process on this machine finds from the warehouse alone
  (beside it when local; for an S3 warehouse in a directory named after it), so the Airflow
  tasks, the Spark job, the audit and the tests all open the same catalog.

docs/iceberg.md shows both, and the SQL catalog on Postgres.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from onceflow.config.s3_connection import S3Connection
from onceflow.storage.local import local_path
from onceflow_devkit.services.rest_catalog import RestCatalog

CONN_ID = "onceflow_iceberg"  # what the example pipelines name (SinkSpec.catalog)


def catalog_properties(state_dir: Path, warehouse: str, s3: S3Connection | None = None) -> dict[str, str]:
    """pyiceberg properties of a SQL catalog in ``state_dir`` whose tables live under ``warehouse``
    (``file:///...`` or ``s3://bucket/prefix``, then on the embedded endpoint ``s3``)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    properties = {"type": "sql", "uri": f"sqlite:///{state_dir / 'catalog.db'}", "warehouse": warehouse}
    if warehouse.startswith("s3://"):
        if s3 is None:
            raise ValueError(f"warehouse {warehouse} is on S3: give the embedded endpoint")
        properties.update({
            "s3.endpoint": s3.endpoint_url or "",
            "s3.region": s3.region or "",
            "s3.access-key-id": s3.access_key or "",
            "s3.secret-access-key": s3.secret_key or "",
        })
    return properties


def _state_dir(warehouse: str) -> Path:
    # An S3 warehouse's catalog database lives on local disk, outside the bucket.
    if warehouse.startswith("s3://"):
        return Path(tempfile.gettempdir()) / "onceflow-iceberg" / hashlib.sha256(warehouse.encode()).hexdigest()[:16]
    return local_path(warehouse) / "_iceberg"


def embedded_catalogs(warehouse: str, s3: S3Connection | None = None,
                      rest: RestCatalog | None = None) -> dict[str, dict[str, str]]:
    """{CONN_ID: properties} of the embedded catalog of onceflow warehouse ``warehouse``: the REST
    catalog ``rest`` (its tables under its own warehouse) when given, else the SQL catalog."""
    if rest is not None:
        return {CONN_ID: rest.properties()}
    warehouse = warehouse.rstrip("/")
    return {CONN_ID: catalog_properties(_state_dir(warehouse), f"{warehouse}/iceberg", s3)}


def forget_embedded_catalogs(warehouse: str) -> None:
    """Drop the catalog of ``warehouse`` (a run that starts from nothing: an S3 warehouse's catalog
    database outlives the embedded S3 store, and would name tables whose files are gone)."""
    shutil.rmtree(_state_dir(warehouse.rstrip("/")), ignore_errors=True)


def table_of(runtime, sink_name: str):
    """The table of Iceberg output ``sink_name``, loaded through its catalog as any engine would."""
    from onceflow.sinks.iceberg import tables

    sink = runtime.spec.sink(sink_name)
    catalog = tables.open_catalog(sink.catalog, runtime.deployment.catalog_properties(sink.catalog, f"sink {sink_name}"))
    return catalog.load_table(sink.target)


def table_history(runtime, sink_name: str) -> list[str]:
    """Lines describing the snapshots of the table of output ``sink_name``: one per committed batch."""
    from onceflow.sinks.iceberg import participant as iceberg_sink

    sink = runtime.spec.sink(sink_name)
    table = table_of(runtime, sink_name)
    lines = [f"[table]   {sink.target} (catalog {sink.catalog}, at {table.location()}): "
             f"{len(table.metadata.snapshots)} snapshots, one per committed batch"]
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        lines.append(f"          snapshot {snapshot.snapshot_id}: batch {summary[iceberg_sink.BATCH_KEY]} "
                     f"(attempt {summary[iceberg_sink.ATTEMPT_KEY]}), {summary['operation'].value} of "
                     f"{summary['added-records'] or 0} rows in {summary['added-data-files'] or 0} files; "
                     f"{summary['total-records']} rows in the table")
    return lines
