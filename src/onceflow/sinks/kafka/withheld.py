"""Records too large for the topic: withheld by the split's writer, published by the commit.

A record larger than the topic takes (``max_record_bytes``: the producer's
``message.max.bytes`` or the topic's ``max.message.bytes``, the smaller) is
never produced: Kafka would refuse it on every replay and the batch could
never commit. ``Withholder`` (Spark executor, inside the split's writer) keeps
it instead, with its size and the reason, in a Parquet file beside the staged
copy (``withheld_uri_of``), which an abort deletes. ``publish_withheld``
(Airflow worker, commit task) copies that file, once, to the batch's withheld
directory beside the ledger, after the batch's records are in the topic.
"""

from __future__ import annotations

import hashlib
from contextlib import ExitStack
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from onceflow.config.warehouse_layout import withheld_dir
from onceflow.core.participant import Outcome, Result
from onceflow.kafka.reader import HEADERS_TYPE
from onceflow.sinks.kafka.handle import TxnHandle
from onceflow.storage.digesting import DigestingWriter
from onceflow.storage import Storage

WITHHELD_SCHEMA = pa.schema(
    [("key", pa.binary()), ("value", pa.binary()), ("headers", HEADERS_TYPE), ("record_bytes", pa.int64()),
     ("reason", pa.string())]
)
# librdkafka's default message.max.bytes: the largest record (and record batch) a producer sends.
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
# What a record adds on the wire to its key, value and header bytes, at most: a record batch of
# one record has a 61-byte header, the record a few varints. Generous, so none slips through.
RECORD_OVERHEAD_BYTES = 128
HEADER_OVERHEAD_BYTES = 10  # a header's key and value lengths (varints), at most


def max_record_bytes_of(config: Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                        topic_limit: int | None = None) -> int:
    """The largest record a producer of ``config`` (and ``overrides``) can put into a topic whose
    ``max.message.bytes`` is ``topic_limit`` (None: the broker does not say): the smaller of the two."""
    producer_limit = int({**config, **(overrides or {})}.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))
    return min(producer_limit, topic_limit) if topic_limit else producer_limit


def withheld_uri_of(staged: str) -> str:
    """Where the split's withheld records go: beside its staged copy, deleted with it by an abort."""
    return f"{staged.removesuffix('.arrow')}.withheld.parquet"


def withheld_file(warehouse: str, h: TxnHandle) -> str:
    """Where a committed split's withheld records are published (one file per split)."""
    return f"{withheld_dir(warehouse, h.pipeline, h.sink, h.batch_id)}/split-{h.split:05d}.parquet"


class Withholder:
    """The records of one split the topic would refuse, kept in the split's withheld file. Not thread-safe."""

    def __init__(self, storage: Storage, uri: str, topic: str, max_record_bytes: int,
                 fixed_headers: Sequence[tuple[str, bytes]]) -> None:
        self.storage, self.uri, self.topic, self.max_record_bytes = storage, uri, topic, max_record_bytes
        self.count = 0
        # Bytes every record carries besides its key, value and own headers (onceflow's, a repair's too).
        self._fixed_bytes = RECORD_OVERHEAD_BYTES + sum(
            len(k.encode()) + len(v) + HEADER_OVERHEAD_BYTES for k, v in fixed_headers)
        self._writer: pq.ParquetWriter | None = None
        self._file: DigestingWriter | None = None
        self._stream = ExitStack()

    def record_bytes(self, batch) -> pa.Array:
        """Each row's size as a record of this split (an upper bound: see RECORD_OVERHEAD_BYTES)."""
        names = batch.schema.names
        sizes = pc.add(pc.fill_null(pc.binary_length(batch.column("value")), 0), self._fixed_bytes)
        if "key" in names:
            sizes = pc.add(sizes, pc.fill_null(pc.binary_length(batch.column("key")), 0))
        if "headers" in names:  # rare: a Python pass only when the rows carry headers of their own
            own = [sum(len(h["key"].encode()) + len(h["value"] or b"") + HEADER_OVERHEAD_BYTES for h in hs) if hs else 0
                   for hs in batch.column("headers").to_pylist()]
            sizes = pc.add(sizes, pa.array(own, pa.int64()))
        return sizes

    def withhold_oversized(self, batch):
        """``batch`` without the rows the topic would refuse; those go to the withheld file."""
        sizes = self.record_bytes(batch)
        if pc.max(sizes).as_py() <= self.max_record_bytes:
            return batch
        over = pc.greater(sizes, self.max_record_bytes)
        rows, over_sizes = batch.filter(over), sizes.filter(over)
        names, n = rows.schema.names, rows.num_rows
        reasons = [f"record of {s} bytes is larger than the {self.max_record_bytes} bytes topic {self.topic!r} takes "
                   "(the smaller of the producer's message.max.bytes and the topic's max.message.bytes)"
                   for s in over_sizes.to_pylist()]
        table = pa.table([
            rows.column("key").cast(pa.binary()) if "key" in names else pa.nulls(n, pa.binary()),
            rows.column("value").cast(pa.binary()),
            rows.column("headers").cast(HEADERS_TYPE) if "headers" in names else pa.nulls(n, HEADERS_TYPE),
            over_sizes.cast(pa.int64()),
            pa.array(reasons, pa.string()),
        ], schema=WITHHELD_SCHEMA)
        if self._writer is None:
            self._file = DigestingWriter(self._stream.enter_context(self.storage.open_write(self.uri)))
            self._writer = pq.ParquetWriter(self._file, WITHHELD_SCHEMA)
        self._writer.write_table(table)
        self.count += n
        return batch.filter(pc.invert(over))

    def close(self) -> dict[str, Any]:
        """Close the withheld file, if any; the handle's withheld fields."""
        if self._writer is not None:
            self._writer.close()
            self._stream.close()
        return {"withheld": self.count, "withheld_uri": self.uri if self.count else "",
                "withheld_sha256": self._file.hexdigest() if self._file else ""}


def publish_withheld(storage: Storage, warehouse: str, h: TxnHandle) -> Result:
    """Copy the split's withheld records to the batch's withheld directory, once (write-once target)."""
    where, target = h.where(), withheld_file(warehouse, h)
    published = storage.read_bytes(target)
    if published is not None:  # a byte copy: the same digest, or another batch's file is in the way
        if hashlib.sha256(published).hexdigest() == h.withheld_sha256:
            return Result(Outcome.ALREADY_DONE, f"{where}: {h.withheld} withheld records published earlier")
        return Result(Outcome.FAILED, f"{where}: {target} holds other records than the {h.withheld} this batch "
                      "withheld (a file left from an earlier pipeline of the same name?); move it away and re-run commit")
    data = storage.read_bytes(h.withheld_uri)
    if data is None:
        return Result(Outcome.FAILED, f"{where}: the file of its {h.withheld} withheld records {h.withheld_uri} is "
                      "gone; they are NOT published. Restore it and re-run commit")
    if hashlib.sha256(data).hexdigest() != h.withheld_sha256:
        return Result(Outcome.FAILED, f"{where}: {h.withheld_uri} does not match the SHA-256 its vote recorded; "
                      "restore the file the vote names and re-run commit")
    storage.create_if_absent(target, data)  # a racing commit wrote the same bytes: either is fine
    return Result(Outcome.DONE, f"{where}: {h.withheld} records too large for the topic withheld to {target}")
