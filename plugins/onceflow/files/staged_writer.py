"""Write one staged Parquet file and describe it. Runs on Spark executors.

One code path for every storage: pyarrow.parquet writes into the storage's
``open_write`` stream through a wrapper that counts and hashes the bytes as
they pass, so size and sha256 cost no second read.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Iterable, Union

import pyarrow as pa
import pyarrow.parquet as pq

from . import layout
from .entries import FileEntry
from .storage import Storage

ArrowData = Union[pa.Table, Iterable[pa.RecordBatch]]


class _HashingStream:
    """Write-only file object that forwards to ``out`` and digests what it forwards."""

    def __init__(self, out):
        self._out = out
        self._sha = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        view = memoryview(data)
        self._sha.update(view)
        self._out.write(view)
        self.size += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self.closed = True  # the storage's context manager closes ``out``

    def writable(self) -> bool:
        return True

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def _batches(data: ArrowData) -> Iterable[pa.RecordBatch]:
    return data.to_batches() if isinstance(data, pa.Table) else data


def write_staged_parquet(data: ArrowData, staging_uri: str, split: int, storage: Storage,
                         task_attempt: int = 0, compression: str = "snappy") -> FileEntry | None:
    """Write ``data`` as one new Parquet file under ``staging_uri``.

    Returns the file's entry for the vote, or None when ``data`` holds no
    batch at all (an empty partition stages nothing). Every call creates a
    new file name, so task retries and speculative attempts never overwrite
    each other; which file counts is decided by the vote.
    """
    batches = iter(_batches(data))
    first = next(batches, None)
    if first is None:
        return None
    name = layout.part_name(split)
    path = layout.join(staging_uri, name)
    rows = 0
    with storage.open_write(path) as out:
        stream = _HashingStream(out)
        with pq.ParquetWriter(pa.PythonFile(stream, mode="w"), first.schema, compression=compression) as writer:
            for batch in itertools.chain((first,), batches):
                writer.write_batch(batch)
                rows += batch.num_rows
    return FileEntry(path, name, stream.size, rows, stream.hexdigest(), split, task_attempt)
