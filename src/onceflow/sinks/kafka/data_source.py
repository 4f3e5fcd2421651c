"""``onceflow_kafka``: pre-commit a DataFrame into open Kafka transactions.

On the sinks' data-source base (``onceflow.sinks.data_source_base``: the call
sequence, the options, the vote), a task attempt pre-commits split i (Spark
partition i): init_transactions on the split's derived transactional.id
(fencing any older attempt of the split), produce, flush, and leave the
transaction OPEN; its message is the TxnHandle. The vote is every split's
handle. A failed job's abort fences every transactional.id of the sink, which
aborts what any attempt opened, the failed tasks' (no message) included.

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

from onceflow.config.deployment import Deployment
from onceflow.config.warehouse_layout import kafka_staging_dir
from onceflow.core.participant import Vote
from onceflow.core.plan import EXACTLY_ONCE, GUARANTEES, NO_GUARANTEE
from onceflow.kafka.lifetime import DEFAULT_TRANSACTION_TIMEOUT_MS
from onceflow.sinks.data_source_base import PreCommitSource, PreCommitWriter, StagedSplit, TaskAttempt, WriteOptions
from onceflow.sinks.kafka.fencing import fence_transactional_ids
from onceflow.sinks.kafka.handle import TxnHandle, vote_payload
from onceflow.sinks.kafka.kind import FORMAT  # the name this data source registers under
from onceflow.sinks.kafka.partitioners import DEFAULT as DEFAULT_PARTITIONER
from onceflow.sinks.kafka.staged import staged_uri
from onceflow.sinks.kafka.writer import DirectSplitWriter, TransactionalSplitWriter
from onceflow.storage import warehouse_storage

REQUIRED = ("pipeline", "deployment", "sink", "topic", "batch_seq", "attempt", "splits", "transactional_ids")


@dataclass(frozen=True)
class KafkaWriteOptions(WriteOptions):
    topic: str = ""
    splits: int = 0
    transactional_ids: tuple[str, ...] = ()  # () for an output written without transactions
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    guarantee: str = EXACTLY_ONCE
    max_record_bytes: int | None = None  # larger records are withheld (writer.py), not produced
    partitioner: str = DEFAULT_PARTITIONER  # where a keyed record goes

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "KafkaWriteOptions":
        opts = WriteOptions.checked(FORMAT, options, REQUIRED)
        guarantee = opts.get("guarantee") or EXACTLY_ONCE
        ids = tuple(json.loads(opts["transactional_ids"]))
        if guarantee not in GUARANTEES or (guarantee == EXACTLY_ONCE) != bool(ids):
            raise ValueError(f"{FORMAT}: guarantee {guarantee!r} with {len(ids)} transactional ids: an exactly_once "
                             "output needs the plan's ids, the other guarantees none")
        return cls(opts.format, opts.raw, topic=opts["topic"], splits=opts.integer("splits"), transactional_ids=ids,
                   transaction_timeout_ms=opts.integer("transaction_timeout_ms") or DEFAULT_TRANSACTION_TIMEOUT_MS,
                   guarantee=guarantee, max_record_bytes=opts.integer("max_record_bytes"),
                   partitioner=opts.get("partitioner") or DEFAULT_PARTITIONER)


class KafkaSplitWriter(PreCommitWriter[StagedSplit]):
    options: KafkaWriteOptions

    def __init__(self, options: KafkaWriteOptions, schema):
        if "value" not in schema.fieldNames():
            raise ValueError(f"{FORMAT}: the DataFrame needs a binary 'value' column (and optionally 'key')")
        super().__init__(options, schema)

    def stage(self, batches: Iterator, task: TaskAttempt) -> StagedSplit:
        """The transaction stays open."""
        opts = self.options
        # Staged copies live in the warehouse (onceflow.config.warehouse_layout), which the deployment names.
        deployment = Deployment.from_option(opts["deployment"])
        if task.split >= opts.splits:
            raise ValueError(
                f"{FORMAT}: partition {task.split} has no split: the plan allows {opts.splits} splits for sink "
                f"{opts.sink!r}; repartition the DataFrame to that many partitions"
            )
        attempt_tag = f"{opts.attempt}-{task.task_attempt}"
        if opts.guarantee == NO_GUARANTEE and not self._first_to_write(deployment, task.split, attempt_tag):
            return StagedSplit({})  # at most once: a retried or speculative task, a retried stage, writes nothing
        transactional = opts.guarantee == EXACTLY_ONCE
        writer = (TransactionalSplitWriter if transactional else DirectSplitWriter)(
            deployment.kafka.config(), opts["pipeline"], opts.sink, opts.batch_id, task.split, opts.topic,
            staged_uri(deployment.warehouse, opts["pipeline"], opts.sink, opts.batch_id, task.split, attempt_tag),
            storage=warehouse_storage(deployment),
            producer_overrides={"transaction.timeout.ms": opts.transaction_timeout_ms},
            max_record_bytes=opts.max_record_bytes,
            partitioner=opts.partitioner,
            **({"transactional_id": opts.transactional_ids[task.split]} if transactional else {"guarantee": opts.guarantee}),
        )
        writer.begin()
        try:
            for batch in batches:
                writer.write_batch(batch)
            return StagedSplit(writer.precommit().to_dict())
        except BaseException:
            writer.abandon()
            raise

    def _first_to_write(self, deployment, split: int, attempt_tag: str) -> bool:
        """Claim the split for this task (create-if-absent in the batch's staging): only the first
        task of the batch to claim it writes a ``none`` output's split."""
        opts = self.options
        claim = f"{kafka_staging_dir(deployment.warehouse, opts['pipeline'], opts.sink, opts.batch_id)}/written-once/split-{split:05d}"
        return warehouse_storage(deployment).create_if_absent(claim, attempt_tag.encode())

    def vote(self, messages: list[StagedSplit]) -> Vote:
        handles = [TxnHandle.from_dict(m.staged) for m in messages if m.staged]
        return Vote(self.options.sink, self.options.batch_seq, self.options.attempt, vote_payload(handles),
                    records=sum(h.records for h in handles), withheld=sum(h.withheld for h in handles))

    def discard(self, messages: list[StagedSplit]) -> None:
        """End what was opened, fence the rest: every transactional id of the sink, messages or none."""
        config = Deployment.from_option(self.options["deployment"]).kafka.config()
        fence_transactional_ids(config, sorted(set(self.options.transactional_ids)))


class OnceflowKafkaDataSource(PreCommitSource):
    format = FORMAT
    writes = "appends inside a transaction"
    required = REQUIRED
    writer_type = KafkaSplitWriter

    def write_options(self) -> KafkaWriteOptions:
        return KafkaWriteOptions.parse(self.options)


register = OnceflowKafkaDataSource.register
