"""Write one pre-committed Parquet file and describe it. Runs on Spark executors.

One code path for every storage: pyarrow.parquet writes into the storage's
``open_write`` stream (or, where the storage keeps files pending until a
commit completes them, its ``open_pending`` stream) through a wrapper that
counts and hashes the bytes as they pass, so size and sha256 cost no second
read.
"""

from __future__ import annotations

import itertools
from typing import Iterable, Union

import pyarrow as pa
import pyarrow.parquet as pq

from onceflow.sinks.files import layout
from onceflow.sinks.files.entries import FileEntry
from onceflow.storage import Storage
from onceflow.storage.base import PendingStorage
from onceflow.storage.digesting import DigestingWriter

ArrowData = Union[pa.Table, Iterable[pa.RecordBatch]]
# Row groups close at whichever comes first (Spark's own writer aims at 128 MiB);
# the bytes bound also caps what one task holds in memory.
ROW_GROUP_ROWS = 1_000_000
ROW_GROUP_BYTES = 128 << 20


def _batches(data: ArrowData) -> Iterable[pa.RecordBatch]:
    return data.to_batches() if isinstance(data, pa.Table) else data


def write_staged_parquet(data: ArrowData, staging_uri: str, split: int, storage: Storage,
                         task_attempt: int = 0, compression: str = "snappy",
                         row_group_rows: int = ROW_GROUP_ROWS, pending_dir: str | None = None) -> FileEntry | None:
    """Write ``data`` as one new Parquet file under ``staging_uri``, or, given
    ``pending_dir`` on a ``PendingStorage``, as a pending file there (its
    committed directory: invisible until the commit completes it).

    Returns the file's entry for the vote, or None when ``data`` holds no
    batch at all (an empty partition stages nothing). Every call creates a
    new file name, so task retries and speculative attempts never overwrite
    each other; which file counts is decided by the vote.

    Spark hands over small Arrow batches (10k rows by default); they are
    gathered into row groups of ``row_group_rows`` so the file reads as well
    as one written by Spark itself.
    """
    batches = iter(_batches(data))
    first = next(batches, None)
    if first is None:
        return None
    name = layout.part_name(split)
    kept_pending = pending_dir is not None
    if kept_pending and not isinstance(storage, PendingStorage):
        raise ValueError(f"{type(storage).__name__} keeps no pending files: stage under {staging_uri} instead")
    path = layout.join(pending_dir if kept_pending else staging_uri, name)
    rows = 0
    with (storage.open_pending(path) if kept_pending else storage.open_write(path)) as out:
        stream = DigestingWriter(out)
        with pq.ParquetWriter(pa.PythonFile(stream, mode="w"), first.schema, compression=compression) as writer:
            pending: list[pa.RecordBatch] = []
            pending_rows = pending_bytes = 0
            for batch in itertools.chain((first,), batches):
                pending.append(batch)
                pending_rows += batch.num_rows
                pending_bytes += batch.nbytes
                if pending_rows >= row_group_rows or pending_bytes >= ROW_GROUP_BYTES:
                    writer.write_table(pa.Table.from_batches(pending), row_group_size=row_group_rows)
                    rows += pending_rows
                    pending, pending_rows, pending_bytes = [], 0, 0
            if pending:
                writer.write_table(pa.Table.from_batches(pending), row_group_size=row_group_rows)
                rows += pending_rows
    return FileEntry(path, name, stream.size, rows, stream.hexdigest(), split, task_attempt,
                     dict(out.token) if kept_pending else None)
