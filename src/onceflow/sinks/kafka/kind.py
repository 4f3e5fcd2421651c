"""The ``kafka`` sink kind: records produced inside transactions left open, one
per split, committed from their handles (``onceflow.kafka``)."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Mapping

from onceflow.core import faults
from onceflow.sinks.kafka.ids import transactional_ids
from onceflow.kafka.lifetime import DEFAULT_SAFETY_FRACTION
from onceflow.sinks.kafka.partitioners import DEFAULT as DEFAULT_PARTITIONER, PARTITIONERS
from onceflow.config.settings import ConfigurationError
from onceflow.sinks.api import (
    EXACTLY_ONCE,
    GUARANTEES,
    OpenTransaction,
    SinkKind,
    refuse_options,
    CommittedOutput,
    committed_parquet,
)
from onceflow.storage import warehouse_storage, warehouse_storage_options
from onceflow.config.warehouse_layout import withheld_dir
from onceflow.sinks.kafka.handle import handles_of
from onceflow.sinks.kafka.headers import sql_batch_and_split

if TYPE_CHECKING:
    from onceflow.sinks.kafka.participant import KafkaSinkParticipant


# The Spark data source that pre-commits this kind (onceflow.sinks.kafka.data_source registers it).
FORMAT = "onceflow_kafka"
# Where a keyed record goes (onceflow.sinks.kafka.partitioners): "crc32" as librdkafka places keys, or
# "murmur2" as Java producers do (co-partitioned with the topics they write).
PARTITIONER_OPTION = "partitioner"
MAX_TIMEOUT_SETTING = "transaction.max.timeout.ms"
TOPIC_LIMIT_SETTING = "max.message.bytes"
log = logging.getLogger(__name__)
AFTER_FENCING = faults.declare("kafka.precommit.after_fencing",
                               "a retried attempt fenced the earlier attempts' transactions, before its writers start")


def check_transaction_timeout(sink, broker_max: str | None) -> None:
    """A producer asking for a longer transaction timeout than the broker allows is
    refused at init_transactions, batch after batch: say so before planning."""
    if broker_max is None:
        return  # the broker reports no limit (the embedded brokers): init_transactions will tell
    if sink.transaction_timeout_ms > int(broker_max):
        raise ConfigurationError(
            f"sink {sink.name!r}: transaction_timeout_ms={sink.transaction_timeout_ms} is above the brokers' "
            f"{MAX_TIMEOUT_SETTING}={broker_max}: lower SinkSpec.transaction_timeout_ms to at most {broker_max}, "
            f"or raise {MAX_TIMEOUT_SETTING} on the brokers"
        )


class KafkaKind(SinkKind):
    name = "kafka"
    data_source = "onceflow.sinks.kafka.data_source"
    fields = ("transaction_timeout_ms", "republish")
    # at_least_once and none: a plain producer, acks=all and idempotent or acks=1, flushed by the job.
    guarantees = tuple(GUARANTEES)

    def check_options(self, sink) -> None:
        refuse_options(sink, takes=(PARTITIONER_OPTION,))
        if self.partitioner(sink) not in PARTITIONERS:
            raise ConfigurationError(f"sink {sink.name!r}: option {PARTITIONER_OPTION}={self.partitioner(sink)!r} is "
                                     f"not valid: use one of {', '.join(sorted(PARTITIONERS))}")

    def partitioner(self, sink) -> str:
        return sink.options.get(PARTITIONER_OPTION, DEFAULT_PARTITIONER)

    def location(self, sink, warehouse: str) -> str:
        return sink.target

    def kafka_topics(self, sink) -> tuple[str, ...]:
        return (sink.target,)

    def asset_uri(self, sink, warehouse: str) -> str:
        # The Asset names the topic; a URI needs a host, and the cluster is a connection.
        return f"kafka://kafka/{sink.target}"

    def transactional_ids(self, pipeline: str, sink, batch_seq: int) -> tuple[str, ...]:
        if sink.guarantee != EXACTLY_ONCE:
            return ()  # written without a transaction: nothing for an abort to fence
        return transactional_ids(pipeline, sink.name, sink.splits, batch_seq)

    def reprocess(self, sink) -> str | None:
        # Committed records cannot be taken back from a topic: only consumers that deduplicate can take them twice.
        return "republished" if sink.republish else None

    def vote_lifetime(self, sink) -> timedelta | None:
        if sink.guarantee != EXACTLY_ONCE:
            return None  # no transaction to outlive
        # The commit refuses a vote older than this fraction of the transaction's timeout.
        return timedelta(milliseconds=sink.transaction_timeout_ms * DEFAULT_SAFETY_FRACTION)

    def check(self, sink, deployment) -> None:
        from confluent_kafka import KafkaException

        from onceflow.kafka.admin import broker_setting

        try:
            limit = broker_setting(deployment.kafka.config(), MAX_TIMEOUT_SETTING)
        except KafkaException as exc:  # no DescribeConfigs permission (ACLs, MSK IAM): init_transactions will tell
            log.warning("sink %s: could not read the brokers' %s (%s); not checked", sink.name, MAX_TIMEOUT_SETTING, exc)
            limit = None
        check_transaction_timeout(sink, limit)

    def max_record_bytes(self, sink, deployment) -> int:
        """The largest record the sink's topic takes from onceflow's producers; larger ones are withheld."""
        from confluent_kafka import KafkaException

        from onceflow.kafka.admin import topic_setting
        from onceflow.sinks.kafka.withheld import max_record_bytes_of

        config = deployment.kafka.config()
        try:
            topic_limit = topic_setting(config, sink.target, TOPIC_LIMIT_SETTING)
        except KafkaException as exc:  # no DescribeConfigs permission: the producer's own limit still holds
            log.warning("sink %s: could not read topic %s's %s (%s); records over the producer's message.max.bytes "
                        "are withheld, a lower topic limit fails the batch", sink.name, sink.target, TOPIC_LIMIT_SETTING, exc)
            topic_limit = None
        return max_record_bytes_of(config, topic_limit=int(topic_limit) if topic_limit else None)

    def open_transactions(self, sink, vote) -> list[OpenTransaction]:
        return [
            OpenTransaction(h.transactional_id, h.split, h.first_write_ms, sink.transaction_timeout_ms)
            for h in handles_of(vote)
            if h.first_write_ms and h.transactional  # a split that wrote nothing began no transaction
        ]

    def participant(self, pipeline, sink, deployment) -> KafkaSinkParticipant:
        from onceflow.sinks.kafka.participant import KafkaSinkParticipant

        return KafkaSinkParticipant(
            sink.name,
            pipeline.name,
            deployment.kafka.config(),
            staging_root=deployment.warehouse,
            storage=warehouse_storage(deployment),
            transaction_timeout_ms=sink.transaction_timeout_ms,
            broker=deployment.kafka.broker,
        )

    def pre_commit(self, frame: Any, sink, sink_plan, deployment, job_options: Mapping[str, str]) -> None:
        options = {
            **job_options,
            "topic": sink.target,
            "splits": str(sink_plan.splits),
            "guarantee": sink_plan.guarantee,
            "transactional_ids": json.dumps(list(sink_plan.transactional_ids)),
            "transaction_timeout_ms": str(sink.transaction_timeout_ms),
            "max_record_bytes": str(self.max_record_bytes(sink, deployment)),
            "partitioner": self.partitioner(sink),
        }
        self.fence_earlier_attempts(deployment.kafka.config(), sink_plan, int(job_options["attempt"]))
        frame.write.format(FORMAT).mode("append").options(**options).save()

    def fence_earlier_attempts(self, config: Mapping[str, Any], sink_plan, attempt: int) -> None:
        """[Spark driver, before the writers start] An earlier attempt may have left transactions open. End
        them here, one id at a time, before the writers' init_transactions would all at once: Tansu 0.6
        loses track of concurrent aborts and leaves later commits on those partitions pending for ever
        (docs/brokers.md)."""
        if attempt > 1 and sink_plan.transactional_ids:
            from onceflow.sinks.kafka.fencing import fence_transactional_ids

            fence_transactional_ids(config, sink_plan.transactional_ids)
            faults.fault_point(AFTER_FENCING)

    def committed_output(self, spark, sink, pipeline, deployment, scope):
        """The whole topic as a read_committed consumer sees it, each record by the batch its onceflow
        headers name, plus the records the commits published in the withheld files."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructType

        from onceflow.kafka.offsets import KafkaOffsetSource
        from onceflow.kafka.reader import RANGE_FORMAT

        batch_of, split_of = sql_batch_and_split("headers")

        with KafkaOffsetSource(deployment.kafka.config()) as source:
            ranges = source.topic_ranges(sink.target)
        records = (spark.read.format(RANGE_FORMAT).option("ranges", json.dumps([r.to_dict() for r in ranges]))
                   .option("deployment", deployment.to_option()).option("columns", "key,value,headers,partition,offset")
                   .load().withColumn("batch", F.expr(batch_of)).withColumn("split", F.expr(split_of)))
        set_aside = 0
        foreign = records.filter(F.col("batch").isNull()).count()
        findings = [f"topic {sink.target}: {foreign} record(s) without onceflow's headers: not written by onceflow"] if foreign else []
        if scope.batches is not None:
            records = records.filter(F.col("batch").isin(sorted(scope.batches)))
        read = ", ".join(f"[{r.partition}] {r.start}..{r.end - 1}" for r in ranges if r.size)
        # The offsets read are part of the finding: a missing row is then either outside them (the read was cut
        # short) or inside them (the topic does not hold it).
        reading = (f"topic {sink.target} as a read_committed consumer sees it (offsets {read or 'none'}), "
                   "records by the batch their onceflow headers name")
        if not deployment.kafka.broker.hides_aborted:  # aborted attempts are visible: keep each committed split's records, by its vote
            written = [(batch, str(h.split), int(p), w.first_offset, w.last_offset)
                       for batch, status in scope.committed.items() if sink.name in status.decision.votes
                       for h in handles_of(status.decision.votes[sink.name]) for p, w in h.partitions.items()]
            ranges_of = spark.createDataFrame(written or [("", "", 0, 0, -1)],
                                              "w_batch string, w_split string, w_partition int, first long, last long")
            voted = ((records["batch"] == ranges_of["w_batch"]) & (records["split"] == ranges_of["w_split"])
                     & (records["partition"] == ranges_of["w_partition"])
                     & records["offset"].between(ranges_of["first"], ranges_of["last"]))
            set_aside = records.join(F.broadcast(ranges_of), voted, "left_anti").count()
            records = records.join(F.broadcast(ranges_of), voted, "left_semi")
            reading += (", restricted to the offsets the committed votes name (this broker shows aborted records "
                        "to read_committed consumers: the topic alone cannot tell them apart); the records outside "
                        "them (aborted attempts, or copies produced since) are set aside")
        # A record keeps only its key and value of the transform's columns.
        stored = StructType([f for f in scope.schema.fields if f.name in ("key", "value")])
        frame = records.select(*(F.col(f.name).cast(f.dataType) for f in stored.fields), "batch")
        root = withheld_dir(deployment.warehouse, pipeline.name, sink.name, "").rstrip("/")
        storage = warehouse_storage(deployment)
        withheld = [[f"{root}/{path}", path.split("/", 1)[0]] for path in storage.list_tree(root)
                    if path.endswith(".parquet") and scope.covers(path.split("/", 1)[0])]
        if withheld:
            frame = frame.unionByName(committed_parquet(spark, withheld, stored, warehouse_storage_options(deployment)))
            reading += f", and the records withheld as too large for the topic, from {root}"
        return CommittedOutput(frame, tuple(findings), reading, set_aside)


KAFKA = KafkaKind()
