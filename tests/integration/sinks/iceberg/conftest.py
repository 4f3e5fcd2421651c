"""A fresh Iceberg table per test, in a namespace of its own: through the dev kit's REST catalog
(a local warehouse), or pyiceberg's SQL catalog on SQLite with the warehouse on the local
filesystem (slow set) or on the embedded S3 (over HTTP)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pyarrow as pa
import pytest

from onceflow.sinks.iceberg import tables
from onceflow.sinks.iceberg.participant import IcebergTableSink
from onceflow_devkit.services.iceberg_catalog import CONN_ID, catalog_properties

SCHEMA = pa.schema([("split", pa.int64()), ("i", pa.int64()), ("day", pa.timestamp("us", tz="UTC"))])
PARTITION_BY = ("day(day)",)


@dataclass
class TableUnderTest:
    properties: dict
    identifier: str
    pipeline: str = "p"
    sink_name: str = "counts"

    def sink(self) -> IcebergTableSink:
        return IcebergTableSink(self.sink_name, self.pipeline, self.identifier, CONN_ID, self.properties)

    def table(self):
        return tables.open_catalog(CONN_ID, self.properties).load_table(self.identifier)

    def rows(self) -> int:
        return self.table().scan().to_arrow().num_rows

    def batch_snapshots(self) -> list[str]:
        """The batch id of each snapshot that committed a batch, oldest first."""
        return [s.summary["onceflow.batch"] for s in self.table().metadata.snapshots if s.summary["onceflow.batch"]]


# make test runs the REST catalog and the SQL catalog on S3 (the REST catalog's server writes no S3).
@pytest.fixture(params=["rest", pytest.param("local", marks=pytest.mark.slow), "s3"])
def iceberg_table(request, tmp_path) -> TableUnderTest:
    if request.param == "rest":
        properties = request.getfixturevalue("rest_catalog").properties()
    elif request.param == "local":
        warehouse = f"file://{tmp_path}/lake"
        properties = catalog_properties(tmp_path / "catalog", warehouse)
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = request.getfixturevalue("s3_bucket")
        properties = catalog_properties(tmp_path / "catalog", f"s3://{bucket}/lake", endpoint)
    under_test = TableUnderTest(properties, f"ns_{uuid.uuid4().hex[:6]}.counts")
    catalog = tables.open_catalog(CONN_ID, properties)
    tables.prepared_table(catalog, under_test.identifier, SCHEMA, PARTITION_BY, "test table")
    return under_test
