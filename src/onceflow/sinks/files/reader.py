"""Read only what is committed: batches whose ``_SUCCESS`` manifest exists,
and only the files that manifest lists. Used by audits and demos (Airflow
worker or driver); a listing of the sink proves nothing on its own.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from onceflow.sinks.files import layout
from onceflow.sinks.files.entries import Manifest
from onceflow.storage import Storage, storage_for


def committed_manifests(sink_uri: str, storage: Storage | None = None) -> list[Manifest]:
    """Manifests of every committed batch of the sink, by batch sequence,
    without the batches another manifest replaces (a reprocessed interval:
    its commit removes the old batch, and until then this hides it)."""
    storage = storage or storage_for(sink_uri)
    out = []
    for name in storage.list_dir(sink_uri):
        seq = layout.seq_of_batch_dir(name)
        if seq is None:
            continue
        data = storage.read_bytes(layout.manifest_path(sink_uri, seq))
        if data is not None:
            out.append(Manifest.from_bytes(data))
    replaced = {m.replaces for m in out if m.replaces is not None}
    return sorted((m for m in out if m.batch_seq not in replaced), key=lambda m: m.batch_seq)


def committed_files(sink_uri: str, storage: Storage | None = None) -> list[str]:
    """Full paths of every committed file, batch by batch."""
    return [
        layout.join(layout.batch_dir(sink_uri, m.batch_seq), f["name"])
        for m in committed_manifests(sink_uri, storage)
        for f in m.files
    ]


def read_committed(sink_uri: str, storage: Storage | None = None) -> pa.Table:
    """All committed rows as one table (meant for audits of modest size), in the union of the
    batches' schemas."""
    storage = storage or storage_for(sink_uri)
    tables = []
    for path in committed_files(sink_uri, storage):
        data = storage.read_bytes(path)
        if data is None:
            raise FileNotFoundError(f"{path} is listed in its batch's _SUCCESS manifest but is gone")
        tables.append(pq.read_table(pa.BufferReader(data)))
    # A column added between batches (a nullable one, the usual schema change) is null in earlier batches.
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({})
