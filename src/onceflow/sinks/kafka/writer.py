"""Pre-commit one split's Kafka output: produce in a transaction left open.

Runs on a Spark executor (one writer per task/split). Call sequence::

    w = TransactionalSplitWriter(config, pipeline, sink, batch_id, split, topic, staged_uri)
    w.begin()                 init_transactions (fences older attempts of this split) + begin
    w.write(...) / w.write_batch(...)
    handle = w.precommit()    flush (the staged copy completing meanwhile), capture producer id/epoch
    -> handle goes into the vote; the transaction stays OPEN until the commit
       task ends it from another process (txn_protocol.end_txn)

Every record carries the header ``onceflow`` (batch, split and a digest of
the split's transactional id: ``headers``), by which the commit task counts
this split's records when it verifies the commit and finds an already
published repair.

The writer picks each record's partition itself (``partitioners``), so the
staged copy knows where every record went and a repair puts it back there.

The staged copy (``staged``) holds the split's records exactly as produced;
the commit task re-publishes it if the broker aborted the transaction (I7).
It is written on a thread of its own while the records are produced.
Records larger than the topic takes are withheld, not produced (``withheld``).
The split's handle (``handle.TxnHandle``) goes into the vote.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import pyarrow as pa
from confluent_kafka import KafkaException, Producer

from onceflow.core import faults
from onceflow.core.batch_id import BatchId
from onceflow.storage import Storage, storage_for
from onceflow.core.plan import AT_LEAST_ONCE, EXACTLY_ONCE
from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import direct_producer_config, producer_config
from onceflow.sinks.kafka.ids import is_split_id, pooled_id
from onceflow.kafka.lifetime import DEFAULT_TRANSACTION_TIMEOUT_MS
from onceflow.sinks.kafka.partitioners import DEFAULT as DEFAULT_PARTITIONER, SplitPartitioner
from onceflow.sinks.kafka.producing import SplitDeliveries, produce_rows, producer_eos
from onceflow.sinks.kafka.headers import CURRENT_FORMAT, REPAIR, record_headers
from onceflow.sinks.kafka.handle import TRANSACTION_VERSION, TxnHandle
from onceflow.sinks.kafka.staged import STAGED_SCHEMA, StagedCopyWriter
from onceflow.sinks.kafka.withheld import Withholder, max_record_bytes_of, withheld_uri_of

_WRITE_CHUNK = 50_000  # rows of write() calls produced together
# A split is produced in bulk: batch for 20 ms, and queue a whole Arrow batch without blocking.
THROUGHPUT_SETTINGS = {"linger.ms": 20, "queue.buffering.max.messages": 500_000}
AFTER_FLUSH = faults.declare("kafka.precommit.after_flush", "Kafka split writer: records flushed in the open transaction, staged copy perhaps not complete, no handle yet")


class PreCommitError(RuntimeError):
    """The split could not be pre-committed; the batch must not commit it."""


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
        transactional_id: str | None = None,
    ):
        self.pipeline, self.sink, self.batch_id, self.split, self.topic = pipeline, sink, batch_id, split, topic
        seq = int(BatchId.parse(batch_id))
        # The plan's id for the split (``transactional_id``); derived when none is given (tools, tests).
        self.txn_id = transactional_id or pooled_id(pipeline, sink, split, seq)
        if not is_split_id(self.txn_id, pipeline, sink, split, seq):
            raise ValueError(f"sink {sink!r} of {pipeline!r}: {self.txn_id!r} is not an id split {split} of batch "
                             f"{batch_id} may use (onceflow.sinks.kafka.ids); the plan was written by another pipeline")
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
        self._deliveries = SplitDeliveries()
        self._partitioner = SplitPartitioner(partitioner, f"sink {sink!r}: partitioner")
        self._first_write_ms = 0
        self._rows: dict[str, list] = {name: [] for name in STAGED_SCHEMA.names}  # of write() calls, not produced yet
        self._staged: StagedCopyWriter | None = None  # opened by begin
        # A repair adds its header to every record: a record must fit with it too.
        self._withholder = Withholder(self._storage, self.withheld_uri, topic, self.max_record_bytes,
                                      [*self._headers, REPAIR])

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
        self._staged = StagedCopyWriter(self._storage, self.staged_uri)

    def _open_topic(self) -> None:
        meta = self._producer.list_topics(self.topic, timeout=self.timeout_s).topics.get(self.topic)
        if meta is not None and meta.error is not None:
            self._check_refusal(meta.error.code(), "looking up its topic")
        if meta is None or meta.error is not None or not meta.partitions:
            raise PreCommitError(f"{self._name()}: output topic {self.topic!r} does not exist: create it first")
        self._partitioner.partition_count = len(meta.partitions)

    def write(self, value: bytes | None, key: bytes | None = None, headers: Sequence[tuple[str, bytes]] | None = None,
              partition: int | None = None) -> None:
        """Add one record. Rows are produced ``_WRITE_CHUNK`` at a time through
        ``write_batch`` (and the rest at ``precommit``): one produce path, which
        knows each partition's last record when it produces it."""
        rows = self._rows
        rows["partition"].append(self._partitioner.partition_for(key) if partition is None else partition)
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
        batch = self._withholder.withhold_oversized(batch)
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
            partitions = self._partitioner.partitions_for(keys)
        self._stage_rows(partitions, batch)
        if not self._first_write_ms:
            self._first_write_ms = int(time.time() * 1000)
        reported = self._deliveries.add(partitions)
        if user_headers is None:
            headers = [self._headers] * n
        else:
            headers = [self._headers + [(h["key"], h["value"]) for h in u] if u else self._headers for u in user_headers]
        produce_rows(self._producer, self.topic, values, keys, partitions, headers, reported,
                     self._deliveries.on_delivery)

    def _stage_rows(self, partitions: list, batch) -> None:
        self._write_rows()  # keep rows of earlier write() calls ahead of this batch
        try:
            self._staged.write(partitions, batch)
        except Exception as exc:
            raise self._staging_failed(exc) from exc

    def precommit(self) -> TxnHandle:
        """Flush everything, capture producer id and epoch; the staged copy is completed meanwhile.

        The transaction is left open. Returns the handle for the vote, which names
        the staged copy only once it is complete (on S3: uploaded).
        """
        self._write_rows()
        self._staged.close()  # it completes while the records are flushed
        produced = self._flush()
        eos = producer_eos(self._producer, self._stats, produced, self.timeout_s)
        if eos is None:
            raise PreCommitError(f"{self._name()}: no statistics sample with the producer id within {self.timeout_s:.0f}s")
        if produced and eos.get("txn_state") != "InTransaction":
            raise PreCommitError(
                f"{self._name()}: transaction is in state {eos.get('txn_state')} after flush; this attempt "
                "cannot be committed and must be re-run"
            )
        self._check_reported()
        faults.fault_point(AFTER_FLUSH)
        try:
            staged_sha256 = self._staged.closed()
        except Exception as exc:
            raise self._staging_failed(exc) from exc
        return self._handle(int(eos["producer_id"]), int(eos["producer_epoch"]), staged_uri=self.staged_uri,
                            staged_sha256=staged_sha256, transaction_version=TRANSACTION_VERSION)

    def _flush(self) -> int:
        """Deliver every record produced (an error names the split); how many there were."""
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
        if self._deliveries.errors:
            self._check_refusal(self._deliveries.errors[0].code(), "delivering its records")
            raise PreCommitError(f"{self._name()}: delivery failed: {self._deliveries.errors[0]}")
        return self._deliveries.total

    def _staging_failed(self, exc: Exception) -> PreCommitError:
        return PreCommitError(f"{self._name()}: could not write its staged copy {self.staged_uri}: {exc}")

    def _check_reported(self) -> None:
        if self._deliveries.unreported():
            raise PreCommitError(f"{self._name()}: no delivery report for partitions {self._deliveries.unreported()}")

    def _handle(self, producer_id: int, epoch: int, **extra: Any) -> TxnHandle:
        """The vote's handle of this split, its withheld file closed."""
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
            partitions=self._deliveries.writes(),
            **self._withholder.close(),
            max_record_bytes=self.max_record_bytes,
            record_format=self.record_format,
            **extra,
        )

    def abandon(self) -> None:
        """Drop the producer without ending the transaction (commit/abort happen elsewhere), and stop
        writing the staged copy."""
        self._producer = None
        if self._staged is not None:
            self._staged.discard()

    # -- internals -----------------------------------------------------------------

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

    def _stage_rows(self, partitions: list, batch) -> None:
        self._write_rows()  # rows of earlier write() calls go first; nothing is staged

    def precommit(self) -> TxnHandle:
        """Flush: the split's records are visible now. The handle says where they went."""
        self._write_rows()
        self._flush()
        self._check_reported()
        return self._handle(-1, -1, guarantee=self.guarantee)
