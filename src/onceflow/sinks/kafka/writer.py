"""Pre-commit one split's Kafka output: produce in a transaction left open.

Runs on a Spark executor (one writer per task/split). Call sequence::

    w = TransactionalSplitWriter(config, pipeline, sink, batch_id, split, topic, staged_uri)
    w.begin()                 init_transactions (fences older attempts of this split) + begin
    w.write(...) / w.write_batch(...)
    handle = w.precommit()    flush, capture producer id/epoch, close the staged copy
    -> handle goes into the vote; the transaction stays OPEN until the commit
       task ends it from another process (txn_protocol.end_txn)

Every record carries the header ``onceflow`` (batch, split and a digest of
the split's transactional id: ``headers``), by which the commit task counts
this split's records when it verifies the commit and finds an already
published repair.

The writer picks each record's partition itself (``partitioners``: CRC32 of
the key as librdkafka does, or murmur2 as Java producers do; round-robin for
null keys), so the staged copy knows where every record went and a repair can
put it back in the same partition.

The staged copy (Arrow IPC stream at ``staged_uri``, written through the
warehouse's ``onceflow.storage``: local, Hadoop FS or S3) holds the split's records
exactly as produced; the commit task re-publishes it if the broker aborted
the transaction (I7).

A record larger than the topic takes (``max_record_bytes``: the producer's
``message.max.bytes`` or the topic's ``max.message.bytes``, the smaller) is
never produced: Kafka would refuse it on every replay and the batch could
never commit. It is withheld instead, with its size and the reason, in a
Parquet file beside the staged copy (``withheld_uri``), which the commit
publishes with the batch (``KafkaSinkParticipant``) and an abort deletes.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, fields
from itertools import islice
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from confluent_kafka import KafkaError, KafkaException, Producer

from onceflow.core import faults
from onceflow.config.warehouse_layout import kafka_staging_dir
from onceflow.core.batch_id import BatchId
from onceflow.storage import Storage, storage_for
from onceflow.core.plan import AT_LEAST_ONCE, EXACTLY_ONCE
from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import direct_producer_config, producer_config
from onceflow.kafka.ids import transactional_id
from onceflow.kafka.produce import produce_waiting
from onceflow.kafka.lifetime import DEFAULT_TRANSACTION_TIMEOUT_MS
from onceflow.sinks.kafka.partitioners import DEFAULT as DEFAULT_PARTITIONER, key_hash
from onceflow.sinks.kafka.headers import CURRENT_FORMAT, REPAIR, record_headers
from onceflow.kafka.reader import HEADERS_TYPE

# The transaction protocol version librdkafka's producers begin on (confluent-kafka 2.x: v1; KIP-890's
# v2 is not spoken). Recorded in each handle: the commit's EndTxn takes that version's path.
TRANSACTION_VERSION = 1

STAGED_SCHEMA = pa.schema(
    [("partition", pa.int32()), ("key", pa.binary()), ("value", pa.binary()), ("headers", HEADERS_TYPE)]
)
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
_WRITE_CHUNK = 50_000  # rows of write() calls produced together
# A split is produced in bulk: batch for 20 ms, and queue a whole Arrow batch without blocking.
THROUGHPUT_SETTINGS = {"linger.ms": 20, "queue.buffering.max.messages": 500_000}
AFTER_FLUSH = faults.declare("kafka.precommit.after_flush", "Kafka split writer: records flushed in the open transaction, staged copy not closed, no handle yet")


class PreCommitError(RuntimeError):
    """The split could not be pre-committed; the batch must not commit it."""


@dataclass(frozen=True)
class PartitionWrite:
    first_offset: int  # offset of this split's first record in the partition
    count: int         # records of this split in the partition
    last_offset: int   # offset of its last record (other splits' records may lie in between)


@dataclass(frozen=True)
class TxnHandle:
    """Everything the commit task needs to end (or repair) a split's open transaction."""

    pipeline: str
    sink: str
    batch_id: str
    split: int
    topic: str
    transactional_id: str
    producer_id: int
    epoch: int
    first_write_ms: int
    partitions: Mapping[int, PartitionWrite] = field(default_factory=dict)
    staged_uri: str = ""
    # SHA-256 of the staged copy's bytes: a repair refuses a copy that changed ("" in older votes).
    staged_sha256: str = ""
    # Records too large for the topic: not produced, kept with their reason (the commit publishes them).
    withheld: int = 0
    withheld_uri: str = ""
    withheld_sha256: str = ""
    # The producer's message.max.bytes (the topic's limit): a repair's producer must keep to it too.
    max_record_bytes: int = 0
    # The headers' format (``headers.FORMATS``); 0 in votes from before this field.
    record_format: int = 0
    # The transaction protocol version the producer began on (``txn_protocol``); 0 in votes
    # from before this field, whose producers all spoke v1.
    transaction_version: int = 0
    # The output's delivery guarantee: anything but exactly_once was written without a transaction
    # (``DirectSplitWriter``), visible as soon as the job flushed it.
    guarantee: str = EXACTLY_ONCE

    @property
    def transactional(self) -> bool:
        return self.guarantee == EXACTLY_ONCE

    @property
    def records(self) -> int:
        return sum(w.count for w in self.partitions.values())

    def to_dict(self) -> dict[str, Any]:
        raw = asdict(self)
        raw["partitions"] = {str(p): asdict(w) for p, w in self.partitions.items()}
        return raw

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "TxnHandle":
        known = {f.name for f in fields(cls)}  # a newer onceflow's fields are left out, not refused
        values = {k: v for k, v in raw.items() if k in known}
        values["partitions"] = {int(p): PartitionWrite(**w) for p, w in raw.get("partitions", {}).items()}
        return cls(**values)


def handle_headers(h: "TxnHandle") -> list[tuple[str, bytes]]:
    """The headers the split of ``h`` put on its records (and a repair of it puts first).
    A vote from before ``record_format`` wrote format 2, or 1 if it has no staged_sha256 either."""
    return record_headers(h.batch_id, h.split, h.transactional_id, h.record_format or (2 if h.staged_sha256 else 1))


def staged_uri(root: str, pipeline: str, sink: str, batch_id: str, split: int, attempt: int) -> str:
    """Where split ``split`` of attempt ``attempt`` keeps its staged copy; abort deletes its directory
    (``onceflow.config.warehouse_layout.kafka_staging_dir``)."""
    return f"{kafka_staging_dir(root, pipeline, sink, batch_id)}/split-{split:05d}-attempt-{attempt}.arrow"


def withheld_uri_of(staged: str) -> str:
    """Where the split's withheld records go: beside its staged copy, deleted with it by an abort."""
    return f"{staged.removesuffix('.arrow')}.withheld.parquet"


def max_record_bytes_of(config: Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                        topic_limit: int | None = None) -> int:
    """The largest record a producer of ``config`` (and ``overrides``) can put into a topic whose
    ``max.message.bytes`` is ``topic_limit`` (None: the broker does not say): the smaller of the two."""
    producer_limit = int({**config, **(overrides or {})}.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))
    return min(producer_limit, topic_limit) if topic_limit else producer_limit


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


class _Digesting:
    """A write-only file that hashes what passes through it to ``target``."""

    def __init__(self, target) -> None:
        self.target = target
        self.digest = hashlib.sha256()
        self.closed = False
        self.written = 0

    def write(self, data) -> int:
        view = memoryview(data)
        self.digest.update(view)
        self.target.write(view)
        self.written += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        self.target.flush()

    def close(self) -> None:
        self.closed = True  # the storage's context closes the target


def _array(column) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


class TransactionalSplitWriter:
    """One transactional producer for one split of one batch. Not thread-safe."""

    record_format = CURRENT_FORMAT  # of the headers it puts on each record (``headers.FORMATS``)

    def __init__(
        self,
        config: Mapping[str, Any],
        pipeline: str,
        sink: str,
        batch_id: str,
        split: int,
        topic: str,
        staged_uri: str,
        storage: Storage | None = None,
        timeout_s: float = 60.0,
        producer_overrides: Mapping[str, Any] | None = None,
        max_record_bytes: int | None = None,
        partitioner: str = DEFAULT_PARTITIONER,
    ):
        self.pipeline, self.sink, self.batch_id, self.split, self.topic = pipeline, sink, batch_id, split, topic
        self.txn_id = transactional_id(pipeline, sink, split, BatchId.parse(batch_id))
        self.staged_uri = staged_uri
        self.withheld_uri = withheld_uri_of(staged_uri)
        self.timeout_s = timeout_s
        self._storage = storage or storage_for(staged_uri)
        self._stats: list[str] = []
        overrides = {
            "statistics.interval.ms": 10,  # the producer id and epoch come from the first sample after the flush
            "stats_cb": self._stats.append,
            **THROUGHPUT_SETTINGS,
            "transaction.timeout.ms": DEFAULT_TRANSACTION_TIMEOUT_MS,
            **(producer_overrides or {}),
        }
        configured = max_record_bytes_of(config, overrides)
        self.max_record_bytes = min(max_record_bytes or configured, configured)
        # Record batches are capped by message.max.bytes too: none may outgrow the topic's limit.
        overrides["message.max.bytes"] = self.max_record_bytes
        self._config = config
        self._producer = Producer(self._producer_config(config, overrides))
        self._headers = record_headers(batch_id, split, self.txn_id, self.record_format)
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._counts: dict[int, int] = {}
        self._partition_count = 0
        self._key_hash = key_hash(partitioner, f"sink {sink!r}: partitioner")
        self._round_robin = 0
        self._first_write_ms = 0
        self._rows: dict[str, list] = {name: [] for name in STAGED_SCHEMA.names}  # of write() calls, not produced yet
        self._stage_writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._stage_stream = ExitStack()
        self._delivery_errors: list[KafkaError] = []
        # Bytes every record carries besides its key, value and own headers; a repair adds its header.
        self._fixed_bytes = RECORD_OVERHEAD_BYTES + sum(
            len(k.encode()) + len(v) + HEADER_OVERHEAD_BYTES for k, v in [*self._headers, REPAIR])
        self._withheld = 0
        self._withheld_writer: pq.ParquetWriter | None = None
        self._withheld_file: _Digesting | None = None
        self._withheld_stream = ExitStack()

    def _producer_config(self, config: Mapping[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
        return producer_config(config, self.txn_id, **overrides)

    # -- lifecycle -----------------------------------------------------------------

    def begin(self) -> None:
        """Fence older attempts of this split, then open the transaction."""
        try:
            self._producer.init_transactions(self.timeout_s)
            self._producer.begin_transaction()
        except KafkaException as exc:
            self._check_refusal(exc.args[0].code(), "opening its transaction")
            raise PreCommitError(f"{self._name()}: could not open a transaction: {exc.args[0]}") from None
        self._open_topic()
        self._stage_file = _Digesting(self._stage_stream.enter_context(self._storage.open_write(self.staged_uri)))
        self._stage_writer = pa.ipc.new_stream(self._stage_file, STAGED_SCHEMA)

    def _open_topic(self) -> None:
        meta = self._producer.list_topics(self.topic, timeout=self.timeout_s).topics.get(self.topic)
        if meta is not None and meta.error is not None:
            self._check_refusal(meta.error.code(), "looking up its topic")
        if meta is None or meta.error is not None or not meta.partitions:
            raise PreCommitError(f"{self._name()}: output topic {self.topic!r} does not exist: create it first")
        self._partition_count = len(meta.partitions)

    def write(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> None:
        """Add one record. Rows are produced ``_WRITE_CHUNK`` at a time through
        ``write_batch`` (and the rest at ``precommit``): one produce path, which
        knows each partition's last record when it produces it."""
        rows = self._rows
        rows["partition"].append(self._partition_for(key) if partition is None else partition)
        rows["key"].append(key)
        rows["value"].append(value)
        rows["headers"].append([{"key": k, "value": v} for k, v in headers] if headers else None)
        if len(rows["value"]) >= _WRITE_CHUNK:
            self._write_rows()

    def _write_rows(self) -> None:
        rows = self._rows
        if rows["value"]:
            batch = pa.RecordBatch.from_pydict(rows, schema=STAGED_SCHEMA)
            for column in rows.values():
                column.clear()
            self.write_batch(batch)

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Produce every row: column ``value``; optional ``key``, ``headers``, ``partition``.

        The fast path for Spark's Arrow writer: the batch goes to the staged
        copy as one Arrow batch, and the produce loop does nothing else.
        """
        if batch.num_rows == 0:
            return
        batch = self._withhold_oversized(batch)
        names = batch.schema.names
        n = batch.num_rows
        if n == 0:
            return
        values = batch.column("value").to_pylist()
        keys = batch.column("key").to_pylist() if "key" in names else [None] * n
        user_headers = batch.column("headers").to_pylist() if "headers" in names else None
        if "partition" in names:
            partitions = batch.column("partition").to_pylist()
        else:
            partitions = self._partitions_for(keys)
        self._stage_rows(partitions, batch, keys, n)
        if not self._first_write_ms:
            self._first_write_ms = int(time.time() * 1000)
        # Rows that need a delivery report: the first row of a partition new to this
        # split, and the last row of every partition in this batch.
        reported = {partitions.index(p) for p in set(partitions) - set(self._counts)}
        backwards = partitions[::-1]
        reported.update(n - 1 - backwards.index(p) for p in set(partitions))
        for p, c in Counter(partitions).items():
            self._counts[p] = self._counts.get(p, 0) + c
        if user_headers is None:
            headers = [self._headers] * n
        else:
            headers = [self._headers + [(h["key"], h["value"]) for h in u] if u else self._headers for u in user_headers]
        # Tight loops between the few rows that need a delivery report.
        start = 0
        for cut in sorted(reported):
            self._produce_rows(values, keys, partitions, headers, start, cut)
            self._produce_reported(values[cut], keys[cut], partitions[cut], headers[cut])
            start = cut + 1
        self._produce_rows(values, keys, partitions, headers, start, n)

    def _record_bytes(self, batch) -> pa.Array:
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

    def _withhold_oversized(self, batch):
        """``batch`` without the rows the topic would refuse; those go to the withheld file."""
        sizes = self._record_bytes(batch)
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
        if self._withheld_writer is None:
            self._withheld_file = _Digesting(self._withheld_stream.enter_context(self._storage.open_write(self.withheld_uri)))
            self._withheld_writer = pq.ParquetWriter(self._withheld_file, WITHHELD_SCHEMA)
        self._withheld_writer.write_table(table)
        self._withheld += n
        return batch.filter(pc.invert(over))

    def _produce_rows(self, values, keys, partitions, headers, start: int, stop: int) -> None:
        """Rows [start, stop), none with a delivery report: the loop that costs per record, so it
        walks the columns together and passes no keyword it does not need."""
        produce, topic = self._producer.produce, self.topic
        i = start
        while i < stop:
            rows = zip(range(i, stop), islice(values, i, stop), islice(keys, i, stop), islice(partitions, i, stop),
                       islice(headers, i, stop))
            try:
                for i, value, key, partition, row_headers in rows:
                    produce(topic, value, key, partition, headers=row_headers)
                i = stop
            except BufferError:  # queue full: row i waits for room, the loop goes on after it
                produce_waiting(self._producer, topic, values[i], keys[i], partitions[i], headers=headers[i])
                i += 1

    def _produce_reported(self, value, key, partition: int, row_headers) -> None:
        """One row whose delivery report says its offset: a partition's first or last of the split."""
        produce_waiting(self._producer, self.topic, value, key, partition, headers=row_headers, on_delivery=self._on_delivery)

    def _partitions_for(self, keys: list) -> list[int]:
        n = self._partition_count
        if None not in keys:
            return [h % n for h in map(self._key_hash, keys)]
        return [self._partition_for(k) for k in keys]

    def _stage_rows(self, partitions: list, batch, keys: list, n: int) -> None:
        self._write_rows()  # keep rows of earlier write() calls ahead of this batch
        names = batch.schema.names
        columns = [
            pa.array(partitions, pa.int32()),
            batch.column("key").cast(pa.binary()) if "key" in names else pa.nulls(n, pa.binary()),
            batch.column("value").cast(pa.binary()),
            batch.column("headers").cast(HEADERS_TYPE) if "headers" in names else pa.nulls(n, HEADERS_TYPE),
        ]
        self._stage_writer.write_batch(pa.RecordBatch.from_arrays([_array(c) for c in columns], schema=STAGED_SCHEMA))

    def precommit(self) -> TxnHandle:
        """Flush everything, capture producer id and epoch, close the staged copy.

        The transaction is left open. Returns the handle for the vote.
        """
        produced = self._flush()
        eos = self._settled_eos(produced)
        if produced and eos.get("txn_state") != "InTransaction":
            raise PreCommitError(
                f"{self._name()}: transaction is in state {eos.get('txn_state')} after flush; this attempt "
                "cannot be committed and must be re-run"
            )
        missing = set(self._counts) - (set(self._first) & set(self._last))
        if missing:
            raise PreCommitError(f"{self._name()}: no delivery report for partitions {sorted(missing)}")
        faults.fault_point(AFTER_FLUSH)
        self._stage_writer.close()
        self._stage_stream.close()  # the staged copy is complete (on S3: uploaded) only now
        return self._handle(int(eos["producer_id"]), int(eos["producer_epoch"]), staged_uri=self.staged_uri,
                            staged_sha256=self._stage_file.digest.hexdigest(), transaction_version=TRANSACTION_VERSION)

    def _flush(self) -> int:
        """Deliver every record written (an error names the split); how many were produced."""
        self._write_rows()
        try:
            remaining = self._producer.flush(self.timeout_s)
        except (KafkaException, SystemError) as exc:
            # A fatal error (fenced by a newer attempt) surfaces from flush; confluent-kafka then
            # reports further failed deliveries as SystemError wrapping the KafkaException.
            cause = exc.__cause__ if isinstance(exc, SystemError) and exc.__cause__ else exc
            if isinstance(cause, KafkaException):
                self._check_refusal(cause.args[0].code(), "delivering its records")
            raise PreCommitError(f"{self._name()}: delivery failed: {cause}") from exc
        if remaining:
            raise PreCommitError(f"{self._name()}: {remaining} records still undelivered after {self.timeout_s:.0f}s")
        if self._delivery_errors:
            self._check_refusal(self._delivery_errors[0].code(), "delivering its records")
            raise PreCommitError(f"{self._name()}: delivery failed: {self._delivery_errors[0]}")
        return sum(self._counts.values())

    def _handle(self, producer_id: int, epoch: int, **extra: Any) -> TxnHandle:
        """The vote's handle of this split, its withheld file closed."""
        if self._withheld_writer is not None:
            self._withheld_writer.close()
            self._withheld_stream.close()
        return TxnHandle(
            pipeline=self.pipeline,
            sink=self.sink,
            batch_id=self.batch_id,
            split=self.split,
            topic=self.topic,
            transactional_id=self.txn_id,
            producer_id=producer_id,
            epoch=epoch,
            first_write_ms=self._first_write_ms,
            partitions={p: PartitionWrite(self._first[p], c, self._last[p]) for p, c in sorted(self._counts.items())},
            withheld=self._withheld,
            withheld_uri=self.withheld_uri if self._withheld else "",
            withheld_sha256=self._withheld_file.digest.hexdigest() if self._withheld_file else "",
            max_record_bytes=self.max_record_bytes,
            record_format=self.record_format,
            **extra,
        )

    def abandon(self) -> None:
        """Drop the producer without ending the transaction (commit/abort happen elsewhere)."""
        self._producer = None

    # -- internals -----------------------------------------------------------------

    def _partition_for(self, key: bytes | None) -> int:
        if key is not None:
            return self._key_hash(key) % self._partition_count
        self._round_robin = (self._round_robin + 1) % self._partition_count
        return self._round_robin

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._delivery_errors.append(err)
            return
        p, offset = msg.partition(), msg.offset()
        self._first[p] = min(offset, self._first.get(p, offset))
        self._last[p] = max(offset, self._last.get(p, offset))

    def _settled_eos(self, produced: int) -> dict[str, Any]:
        """The first statistics sample showing every record delivered (later than the flush)."""
        deadline = time.monotonic() + self.timeout_s
        self._stats.clear()
        while time.monotonic() < deadline:
            self._producer.poll(0.05)
            while self._stats:
                sample = json.loads(self._stats.pop(0))
                eos = sample.get("eos", {})
                if eos.get("producer_id", -1) >= 0 and sample.get("msg_cnt", 1) == 0 and sample.get("txmsgs", 0) >= produced:
                    return eos
        raise PreCommitError(f"{self._name()}: no statistics sample with the producer id within {self.timeout_s:.0f}s")

    def _name(self) -> str:
        return f"batch {self.batch_id} sink {self.sink} split {self.split} ({self.txn_id})"

    def _check_refusal(self, code: int, doing: str) -> None:
        """``NotAuthorized`` for a refusal, naming the grant (``onceflow.kafka.refusals``)."""
        refusals.check(self._config, code, f"split {self.split} of batch {self.batch_id} of {self.pipeline}: {doing}",
                       {Resource.TOPIC: ("WRITE", self.topic), Resource.TRANSACTIONAL_ID: ("WRITE", self.txn_id)})


class DirectSplitWriter(TransactionalSplitWriter):
    """One split of an output whose guarantee is at_least_once or none: the same records and
    headers (so the audit attributes them), produced without a transaction and visible once
    flushed. Nothing is staged: there is no transaction for a broker to abort, so nothing to repair."""

    def __init__(self, *args: Any, guarantee: str = AT_LEAST_ONCE, **kwargs: Any):
        if guarantee == EXACTLY_ONCE:
            raise ValueError("an exactly_once split is written by TransactionalSplitWriter")
        self.guarantee = guarantee
        super().__init__(*args, **kwargs)

    def _producer_config(self, config: Mapping[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
        overrides.pop("transaction.timeout.ms", None)
        return direct_producer_config(config, acks_all=self.guarantee == AT_LEAST_ONCE, **overrides)

    def begin(self) -> None:
        self._open_topic()

    def _stage_rows(self, partitions: list, batch, keys: list, n: int) -> None:
        self._write_rows()  # rows of earlier write() calls go first; nothing is staged

    def precommit(self) -> TxnHandle:
        """Flush: the split's records are visible now. The handle says where they went."""
        self._flush()
        missing = set(self._counts) - (set(self._first) & set(self._last))
        if missing:
            raise PreCommitError(f"{self._name()}: no delivery report for partitions {sorted(missing)}")
        return self._handle(-1, -1, guarantee=self.guarantee)
