"""Mirror a committed batch's input offsets to the pipeline's consumer group.

Runs on an Airflow worker (commit task, after the decision is applied). The
ledger, not the group, is the source of truth for where the next batch
starts; the group copy exists so that standard lag tools
(kafka-consumer-groups, Burrow, exporters) show the truth.

Forward-only: a partition whose committed offset is already at or past the
batch's end is left alone, so a late retry of an older batch never moves lag
backwards. Idempotent. Verified by reading the committed offsets back.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

from onceflow.core.participant import Outcome, Result
from onceflow.core.plan import OffsetRange
from onceflow.kafka.config import consumer_config


def mirror_offsets(config: Mapping[str, Any], group_id: str, ranges: Sequence[OffsetRange], timeout_s: float = 30.0) -> Result:
    """Commit each range's end for ``group_id``; returns DONE, ALREADY_DONE or RETRY_LATER."""
    if not ranges:
        return Result(Outcome.ALREADY_DONE, "no input ranges")
    consumer = Consumer(consumer_config(config, group_id))
    try:
        tps = [TopicPartition(r.topic, r.partition) for r in ranges]
        current = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(tps, timeout=timeout_s)}
        wanted = [
            TopicPartition(r.topic, r.partition, r.end)
            for r in ranges
            if current.get((r.topic, r.partition), -1) < r.end
        ]
        if not wanted:
            return Result(Outcome.ALREADY_DONE, f"group {group_id} is already at or past the batch's ends")
        consumer.commit(offsets=wanted, asynchronous=False)
        after = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(tps, timeout=timeout_s)}
    except KafkaException as exc:
        return Result(Outcome.RETRY_LATER, f"committing offsets for group {group_id} failed: {exc.args[0]}")
    finally:
        consumer.close()
    behind = [f"{r.topic}[{r.partition}] at {after.get((r.topic, r.partition))} < {r.end}" for r in ranges if after.get((r.topic, r.partition), -1) < r.end]
    if behind:
        return Result(Outcome.RETRY_LATER, f"group {group_id} offsets did not take: {', '.join(behind)}")
    return Result(Outcome.DONE, f"group {group_id} moved to the batch's ends on {len(wanted)} partition(s)")
