"""A split's staged copy: its records exactly as produced, for a repair (I7).

Written on a Spark executor by ``writer.TransactionalSplitWriter`` (an Arrow
IPC stream at ``staged_uri``, through the warehouse's ``onceflow.storage``:
local, Hadoop FS or S3); read back on an Airflow worker by ``repair`` when the
broker aborted the split's transaction; deleted by an abort or after the
commit.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa

from onceflow.config.warehouse_layout import kafka_staging_dir
from onceflow.kafka.reader import HEADERS_TYPE
from onceflow.storage import Storage

STAGED_SCHEMA = pa.schema(
    [("partition", pa.int32()), ("key", pa.binary()), ("value", pa.binary()), ("headers", HEADERS_TYPE)]
)


def staged_uri(root: str, pipeline: str, sink: str, batch_id: str, split: int, attempt: int) -> str:
    """Where split ``split`` of attempt ``attempt`` keeps its staged copy; abort deletes its directory
    (``onceflow.config.warehouse_layout.kafka_staging_dir``)."""
    return f"{kafka_staging_dir(root, pipeline, sink, batch_id)}/split-{split:05d}-attempt-{attempt}.arrow"


def staged_batch(partitions: list[int], batch) -> pa.RecordBatch:
    """The rows of ``batch`` (column ``value``; optional ``key``, ``headers``) as staged, each with its partition."""
    names, n = batch.schema.names, batch.num_rows
    columns = [
        pa.array(partitions, pa.int32()),
        batch.column("key").cast(pa.binary()) if "key" in names else pa.nulls(n, pa.binary()),
        batch.column("value").cast(pa.binary()),
        batch.column("headers").cast(HEADERS_TYPE) if "headers" in names else pa.nulls(n, HEADERS_TYPE),
    ]
    return pa.RecordBatch.from_arrays([_array(c) for c in columns], schema=STAGED_SCHEMA)


def _array(column) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


class StagedCopyDamaged(Exception):
    """The staged copy is not the bytes the vote recorded."""


def open_staged(uri: str, storage: Storage, sha256: str = "") -> pa.Table:
    """Read a staged copy back (commit task, for a repair), checking its digest."""
    data = storage.read_bytes(uri)
    if data is None:
        raise FileNotFoundError(f"staged copy {uri} is gone")
    if sha256 and hashlib.sha256(data).hexdigest() != sha256:
        raise StagedCopyDamaged(f"staged copy {uri} does not match the SHA-256 its vote recorded: it was changed or damaged")
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
