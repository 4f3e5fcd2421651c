"""The dev kit's Iceberg REST catalog keeps its tables in its SQLite file: killed and started
again on its port, it serves every table and snapshot it had; none of the caller's CATALOG_*
variables reaches it (the server takes each as a catalog property)."""

from __future__ import annotations

import pyarrow as pa

from onceflow.sinks.iceberg import tables
from onceflow_devkit.services.iceberg_catalog import CONN_ID
from onceflow_devkit.services.process import ManagedProcess
from onceflow_devkit.services.rest_catalog import start_rest_catalog


def test_a_killed_catalog_started_again_serves_the_tables_it_had(tmp_path, monkeypatch):
    # The server would take it as catalog-impl, and forget every table at a restart.
    monkeypatch.setenv("CATALOG_CATALOG__IMPL", "org.apache.iceberg.inmemory.InMemoryCatalog")
    proc = ManagedProcess("iceberg-rest", tmp_path / "iceberg-rest").reset()
    catalog = start_rest_catalog(proc, f"file://{tmp_path}/lake", die_with_parent=True)
    try:
        table = tables.prepared_table(tables.open_catalog(CONN_ID, catalog.properties()), "ns.kept",
                                      pa.schema([("i", pa.int64())]), (), "test table")
        table.append(pa.table({"i": [1, 2, 3]}), snapshot_properties={"onceflow.batch": "0000000001"})
        assert table.location() == f"file://{tmp_path}/lake/ns/kept"

        again = catalog.restart(kill=True, die_with_parent=True)
        assert again.uri == catalog.uri
        kept = tables.open_catalog(CONN_ID, again.properties()).load_table("ns.kept")
        assert kept.scan().to_arrow().num_rows == 3
        assert [s.summary["onceflow.batch"] for s in kept.metadata.snapshots] == ["0000000001"]
    finally:
        proc.stop(grace=2)
