"""Mirror a committed batch's input offsets to the pipeline's consumer group.

Runs on an Airflow worker (commit task, after the decision is applied). The
ledger, not the group, is the source of truth for where the next batch
starts; the group copy exists so that standard lag tools
(kafka-consumer-groups, Burrow, exporters) show the truth.

Forward-only: a partition whose committed offset is already at or past the
batch's end is left alone, so a late retry of an older batch never moves lag
backwards. Idempotent. Verified by reading the committed offsets back.

A group's coordinator may be moving or still loading its offsets (a fresh
cluster, a broker restart): the broker answers NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS, errors Kafka marks retriable. Those are retried
here until ``timeout_s``; only what outlasts it fails the task.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from onceflow.core.participant import Outcome, Result
from onceflow.core.plan import OffsetRange
from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import consumer_config

T = TypeVar("T")
RETRY_PAUSE_S = 0.2
# Retriable in Kafka's protocol, though librdkafka does not flag them so when committed() meets them.
COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                KafkaError.COORDINATOR_NOT_AVAILABLE})
# How long one question for the committed offsets waits before the consumer's events are looked at; a
# question that timed out is asked again until the deadline.
ASK_S = 1.0
ASK_AGAIN = COORDINATOR_MOVING | {KafkaError._TIMED_OUT}


def _retrying(call: Callable[[], T], deadline: float) -> T:
    """``call()``, again while it fails with an error Kafka marks retriable and ``deadline`` is ahead."""
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in ASK_AGAIN) or time.monotonic() + RETRY_PAUSE_S > deadline:
                raise
        time.sleep(RETRY_PAUSE_S)


def mirror_offsets(config: Mapping[str, Any], group_id: str, ranges: Sequence[OffsetRange], timeout_s: float = 30.0) -> Result:
    """Commit each range's end for ``group_id``; returns DONE, ALREADY_DONE or RETRY_LATER."""
    if not ranges:
        return Result(Outcome.ALREADY_DONE, "no input ranges")
    consumer = Consumer(consumer_config(config, group_id))
    deadline = time.monotonic() + timeout_s
    needs = {Resource.GROUP: ("READ", group_id), Resource.TOPIC: ("READ", ", ".join(sorted({r.topic for r in ranges})))}
    doing = "mirroring the batch's input offsets to its consumer group"

    def refused() -> None:
        """A refusal librdkafka reports on its own, as an event (a lookup of the group's coordinator)."""
        event = consumer.poll(0)
        if event is not None and event.error() is not None:
            refusals.check(config, event.error().code(), doing, needs)

    try:
        tps = [TopicPartition(r.topic, r.partition) for r in ranges]

        def committed() -> dict[tuple[str, int], int]:
            remaining = max(deadline - time.monotonic(), 1.0)
            try:
                return {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(tps, timeout=min(remaining, ASK_S))}
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError._TIMED_OUT:
                    refused()  # the group's coordinator lookup may have been refused: that is no reason to wait
                raise

        current = _retrying(committed, deadline)
        wanted = [
            TopicPartition(r.topic, r.partition, r.end)
            for r in ranges
            if current.get((r.topic, r.partition), -1) < r.end
        ]
        if not wanted:
            return Result(Outcome.ALREADY_DONE, f"group {group_id} is already at or past the batch's ends")
        _retrying(lambda: consumer.commit(offsets=wanted, asynchronous=False), deadline)
        after = _retrying(committed, deadline)
    except KafkaException as exc:
        refusals.check(config, exc.args[0].code(), doing, needs)
        return Result(Outcome.RETRY_LATER, f"committing offsets for group {group_id} failed: {exc.args[0]}")
    finally:
        consumer.close()
    behind = [f"{r.topic}[{r.partition}] at {after.get((r.topic, r.partition))} < {r.end}" for r in ranges if after.get((r.topic, r.partition), -1) < r.end]
    if behind:
        return Result(Outcome.RETRY_LATER, f"group {group_id} offsets did not take: {', '.join(behind)}")
    return Result(Outcome.DONE, f"group {group_id} moved to the batch's ends on {len(wanted)} partition(s)")
