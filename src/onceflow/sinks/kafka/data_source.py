"""``onceflow_kafka``: pre-commit a DataFrame into open Kafka transactions.

Call sequence (Spark's DataSourceWriter contract)::

    OnceflowKafkaDataSource.writer()   driver: options checked (fails fast)
    KafkaSplitWriter.write(batches)    executor, once per task ATTEMPT: Spark partition i
                                       is split i; init_transactions on the split's
                                       derived transactional.id (fencing any older
                                       attempt of the split), produce, flush, leave
                                       the transaction OPEN; returns the TxnHandle
    KafkaSplitWriter.commit(msgs)      a Python worker (NOT the driver), once per job:
                                       the vote (every split's handle) goes to the ledger
    KafkaSplitWriter.abort(msgs)       a Python worker, when the job fails: fences every
                                       transactional.id of the sink, which aborts what
                                       any attempt opened, the failed tasks' (``None``
                                       messages) included

Why no duplicates from Spark itself: a retried or speculative attempt of a
split uses the same transactional.id, so its ``init_transactions`` aborts the
older attempt's open transaction; only the handles of attempts Spark
committed reach ``commit(messages)``, and only those are in the vote.

The DataFrame must have exactly ``splits`` partitions (``run_batch``
repartitions it) and columns ``value`` (binary) and optionally ``key``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator, Mapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    WriterCommitMessage,
)

from onceflow.kafka.lifetime import DEFAULT_TRANSACTION_TIMEOUT_MS
from onceflow.sinks.kafka.partitioners import DEFAULT as DEFAULT_PARTITIONER
from onceflow.core.batch_id import BatchId
from onceflow.core.plan import EXACTLY_ONCE, GUARANTEES, NO_GUARANTEE
from onceflow.sinks.kafka.kind import FORMAT  # the name this data source registers under
from onceflow.sinks.writer_options import FAULTS_OPTION, armed_as_job, checked_options, int_option
from onceflow.storage import warehouse_storage

REQUIRED = ("pipeline", "deployment", "sink", "topic", "batch_seq", "attempt", "splits", "transactional_ids")


@dataclass(frozen=True)
class HandleMessage(WriterCommitMessage):
    handle: dict


@dataclass(frozen=True)
class KafkaWriteOptions:
    deployment: str
    pipeline: str
    sink: str
    topic: str
    batch_seq: int
    attempt: int
    splits: int
    transactional_ids: tuple[str, ...]  # () for an output written without transactions
    transaction_timeout_ms: int
    guarantee: str = EXACTLY_ONCE
    max_record_bytes: int | None = None  # larger records are withheld (writer.py), not produced
    partitioner: str = DEFAULT_PARTITIONER  # where a keyed record goes
    faults: str = ""  # the run's faults, for a Spark Connect server's workers (writer_options)

    @property
    def batch_id(self) -> str:
        return str(BatchId(self.batch_seq))

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "KafkaWriteOptions":
        opts = checked_options(FORMAT, options, REQUIRED)
        ints = {key: int_option(FORMAT, opts, key)
                for key in ("batch_seq", "attempt", "splits", "transaction_timeout_ms", "max_record_bytes")}
        guarantee = opts.get("guarantee") or EXACTLY_ONCE
        ids = tuple(json.loads(opts["transactional_ids"]))
        if guarantee not in GUARANTEES or (guarantee == EXACTLY_ONCE) != bool(ids):
            raise ValueError(f"{FORMAT}: guarantee {guarantee!r} with {len(ids)} transactional ids: an exactly_once "
                             "output needs the plan's ids, the other guarantees none")
        return cls(
            opts["deployment"], opts["pipeline"], opts["sink"], opts["topic"], ints["batch_seq"], ints["attempt"],
            ints["splits"], ids,
            ints["transaction_timeout_ms"] or DEFAULT_TRANSACTION_TIMEOUT_MS,
            guarantee,
            ints["max_record_bytes"],
            partitioner=opts.get("partitioner") or DEFAULT_PARTITIONER,
            faults=opts.get(FAULTS_OPTION, ""),
        )


class KafkaSplitWriter(DataSourceArrowWriter):
    def __init__(self, options: KafkaWriteOptions):
        self.options = options

    @armed_as_job
    def write(self, iterator: Iterator) -> HandleMessage:
        """Executor: pre-commit this task attempt's split; the transaction stays open."""
        from pyspark import TaskContext

        from onceflow.sinks.kafka.writer import DirectSplitWriter, TransactionalSplitWriter, staged_uri
        from onceflow.config.deployment import Deployment

        opts = self.options
        # Staged copies live in the warehouse (onceflow.config.warehouse_layout), which the deployment names.
        deployment = Deployment.from_option(opts.deployment)
        task = TaskContext.get()
        split = task.partitionId()
        if split >= opts.splits:
            raise ValueError(
                f"{FORMAT}: partition {split} has no split: the plan allows {opts.splits} splits for sink "
                f"{opts.sink!r}; repartition the DataFrame to that many partitions"
            )
        # taskAttemptId is unique in the application: attemptNumber restarts at 0 when a stage is retried.
        attempt_tag = f"{opts.attempt}-{task.taskAttemptId()}"
        if opts.guarantee == NO_GUARANTEE and not self._first_to_write(deployment, split, attempt_tag):
            return HandleMessage({})  # at most once: a retried or speculative task, a retried stage, writes nothing
        transactional = opts.guarantee == EXACTLY_ONCE
        writer = (TransactionalSplitWriter if transactional else DirectSplitWriter)(
            deployment.kafka.config(), opts.pipeline, opts.sink, opts.batch_id, split, opts.topic,
            staged_uri(deployment.warehouse, opts.pipeline, opts.sink, opts.batch_id, split, attempt_tag),
            storage=warehouse_storage(deployment),
            producer_overrides={"transaction.timeout.ms": opts.transaction_timeout_ms},
            max_record_bytes=opts.max_record_bytes,
            partitioner=opts.partitioner,
            **({} if transactional else {"guarantee": opts.guarantee}),
        )
        if transactional and writer.txn_id != opts.transactional_ids[split]:
            raise ValueError(
                f"{FORMAT}: split {split} derives transactional id {writer.txn_id!r} but the plan allows "
                f"{opts.transactional_ids[split]!r}; the plan was written by another version of the pipeline"
            )
        writer.begin()
        try:
            for batch in iterator:
                writer.write_batch(batch)
            return HandleMessage(writer.precommit().to_dict())
        except BaseException:
            writer.abandon()
            raise

    def _first_to_write(self, deployment, split: int, attempt_tag: str) -> bool:
        """Claim the split for this task (create-if-absent in the batch's staging): only the first
        task of the batch to claim it writes a ``none`` output's split."""
        from onceflow.config.warehouse_layout import kafka_staging_dir

        opts = self.options
        claim = f"{kafka_staging_dir(deployment.warehouse, opts.pipeline, opts.sink, opts.batch_id)}/written-once/split-{split:05d}"
        return warehouse_storage(deployment).create_if_absent(claim, attempt_tag.encode())

    @armed_as_job
    def commit(self, messages: list[HandleMessage | None]) -> None:
        """Python worker, once per successful job: record the vote in the ledger."""
        from onceflow.sinks.kafka.handle import vote_payload
        from onceflow.sinks.kafka.writer import TxnHandle
        from onceflow.core.participant import Vote
        from onceflow.sinks.votes import record_vote

        handles = [TxnHandle.from_dict(m.handle) for m in messages if m is not None and m.handle]
        vote = Vote(self.options.sink, self.options.batch_seq, self.options.attempt, vote_payload(handles),
                    records=sum(h.records for h in handles), withheld=sum(h.withheld for h in handles))
        record_vote({"pipeline": self.options.pipeline, "deployment": self.options.deployment}, vote)

    @armed_as_job
    def abort(self, messages: list[HandleMessage | None]) -> None:
        """Python worker, when the job fails: end what was opened, fence the rest."""
        from onceflow.sinks.kafka.fencing import fence_transactional_ids
        from onceflow.config.deployment import Deployment

        config = Deployment.from_option(self.options.deployment).kafka.config()
        fence_transactional_ids(config, sorted(set(self.options.transactional_ids)))


class OnceflowKafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def writer(self, schema, overwrite: bool) -> KafkaSplitWriter:
        if overwrite:
            raise ValueError(f"{FORMAT} appends inside a transaction: use .mode('append')")
        if "value" not in schema.fieldNames():
            raise ValueError(f"{FORMAT}: the DataFrame needs a binary 'value' column (and optionally 'key')")
        return KafkaSplitWriter(KafkaWriteOptions.parse(self.options))


def register(spark) -> None:
    spark.dataSource.register(OnceflowKafkaDataSource)
