"""A split's staged copy: its records exactly as produced, for a repair (I7).

Written on a Spark executor by ``writer.TransactionalSplitWriter`` through a
``StagedCopyWriter`` (an Arrow IPC stream at ``staged_uri``, through the
warehouse's ``onceflow.storage``: local, Hadoop FS or S3); read back on an
Airflow worker by ``repair`` when the broker aborted the split's transaction;
deleted by an abort or after the commit.
"""

from __future__ import annotations

import hashlib
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack

import pyarrow as pa

from onceflow.config.warehouse_layout import kafka_staging_dir
from onceflow.kafka.reader import HEADERS_TYPE
from onceflow.storage import DigestingWriter, Storage

_log = logging.getLogger(__name__)

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


class StagedCopyGivenUp(Exception):
    """Why a staged copy's storage was told not to keep what it holds."""


class StagedCopyWriter:
    """Writes one split's staged copy on a thread of its own, while the writer produces the split's
    records: the copy's bytes (written, hashed, on S3 uploaded) cost the produce loop nothing but the
    cores they share. Batches are written in the order given, one at a time. A failure surfaces at the
    next ``write`` or at ``closed``, and at every call after; the storage is then told not to keep the
    copy, as it is when the copy is discarded. Not thread-safe: one producing thread calls it."""

    def __init__(self, storage: Storage, uri: str) -> None:
        self.uri = uri
        self._stream = ExitStack()
        self._file = DigestingWriter(self._stream.enter_context(storage.open_write(uri)))
        self._ipc = pa.ipc.new_stream(self._file, STAGED_SCHEMA)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="onceflow-staged-copy")
        self._pending: Future | None = None
        self._closing: Future | None = None
        self._failed: BaseException | None = None  # the first failure of a write

    def write(self, partitions: list[int], batch) -> None:
        """Stage the rows of ``batch``, each with its partition, after the batches before it."""
        staged = staged_batch(partitions, batch)
        self._settle()  # one batch in flight: the copy never lags the records by more than a batch
        self._pending = self._thread.submit(self._ipc.write_batch, staged)

    def close(self) -> None:
        """Start completing the copy after the batch in flight (end of stream, the file closed: on S3,
        uploaded); ``closed`` waits for it."""
        self._closing = self._thread.submit(self._complete, self._pending)

    def closed(self) -> str:
        """Once the copy is complete: the SHA-256 of its bytes, for the vote. Raises what failed."""
        if self._closing is None:
            self.close()
        try:
            self._settle()
            return self._closing.result()
        finally:
            self._thread.shutdown()

    def discard(self) -> None:
        """Give the copy up: what has not started is dropped and what has is waited for, then the
        storage is told not to keep it, all before this returns (an abort may delete the batch's
        staging next). A copy already complete is left to the abort."""
        self._thread.shutdown(wait=True, cancel_futures=True)
        if self._closing is None or self._closing.cancelled():  # the completion, which ends the context, never ran
            self._end(StagedCopyGivenUp(f"staged copy {self.uri}: given up by its writer"))

    def _complete(self, last_write: Future | None) -> str:
        """On the copy's thread, after ``last_write``: the end of stream, then the storage's context."""
        failed = self._failed or (last_write.exception() if last_write is not None else None)
        if failed is not None:
            self._end(StagedCopyGivenUp(f"staged copy {self.uri}: a write failed ({failed!r})"))
            return ""  # ``closed`` raises the write's failure
        try:
            self._ipc.close()
        except BaseException as exc:
            self._end(exc)
            raise
        self._stream.close()  # a failure here (an S3 upload) passes through the storage's own clean-up
        return self._file.hexdigest()

    def _end(self, failure: BaseException) -> None:
        """Exit the storage's write context with ``failure``: it drops what it holds (S3 deletes the object)."""
        try:
            self._stream.__exit__(type(failure), failure, failure.__traceback__)
        except BaseException as exc:  # the storage re-raised ``failure``, or failed to drop the copy
            if exc is not failure:
                _log.warning("%s: the storage could not drop it: %s", self.uri, exc)

    def _settle(self) -> None:
        """Wait for the write in flight; raise the first failure of any write, now and at every call after."""
        pending, self._pending = self._pending, None
        if pending is not None and self._failed is None:
            self._failed = pending.exception()
        if self._failed is not None:
            raise self._failed


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
