"""Helpers for the Kafka tests: topics, raw transactional writes, a read_committed audit."""

from __future__ import annotations

import time
import uuid
from typing import Any, Mapping, Sequence

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(config: Mapping[str, Any], partitions: int = 2, prefix: str = "t",
                 topic_config: Mapping[str, str] | None = None, replication: int = 1,
                 on_broker: int | None = None) -> str:
    """A new topic; ``on_broker`` places every partition's one replica on that broker (node id)."""
    topic = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(dict(config))
    placed = {"num_partitions": partitions, "replication_factor": -1, "replica_assignment": [[on_broker]] * partitions} \
        if on_broker is not None else {"num_partitions": partitions, "replication_factor": replication}
    admin.create_topics([NewTopic(topic, config=dict(topic_config or {}), **placed)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # metadata can lag the create on both brokers
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions:
            return topic
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} did not appear")


def produce_txn(config: Mapping[str, Any], topic: str, values: list[bytes], partition: int, commit: bool, txn_id: str | None = None) -> None:
    """One plain confluent-kafka transaction, committed or aborted."""
    producer = Producer({**config, "transactional.id": txn_id or f"raw-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, v, partition=partition)
    producer.flush(30)
    (producer.commit_transaction if commit else producer.abort_transaction)(30)


def read_committed(config: Mapping[str, Any], topic: str, partitions: int, timeout_s: float = 20.0,
                   isolation: str = "read_committed") -> list[tuple[int, bytes, list]]:
    """Every record a read_committed (or ``isolation``) consumer sees, up to each partition's end:
    (partition, value, headers)."""
    consumer = Consumer(
        {**config, "group.id": f"audit-{uuid.uuid4().hex[:6]}", "isolation.level": isolation,
         "enable.auto.commit": False, "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list[tuple[int, bytes, list]] = []
    at_eof: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(at_eof) < partitions and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.2):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_eof.add(m.partition())
                        continue
                    if m.error().retriable() or m.error().code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
                        continue  # a broker restarting or a leader moving: the client tries again
                    raise AssertionError(str(m.error()))
                at_eof.discard(m.partition())
                seen.append((m.partition(), m.value(), m.headers() or []))
    finally:
        consumer.close()
    assert len(at_eof) == partitions, f"audit of {topic} did not reach the end of every partition"
    return seen


def open_transaction(broker, topic: str) -> bool:
    """True while some partition of ``topic`` has a transaction in flight
    (last stable offset below the high watermark)."""
    return any(lso < hwm for _, lso, hwm in kafka_output_state(broker, [topic], count=False).values())


def kafka_output_state(broker, topics: list[str], count: bool = True) -> dict[str, tuple[int, int, int]]:
    """Per output topic: (records a fresh read_committed consumer sees,
    last stable offset, high watermark), summed over partitions. LSO below
    the high watermark means a transaction is still open."""
    consumer = Consumer(broker.config(**{"group.id": f"killed-audit-{uuid.uuid4().hex[:6]}",
                                         "isolation.level": "read_committed", "enable.auto.commit": False}))
    raw = Consumer(broker.config(**{"group.id": f"killed-raw-{uuid.uuid4().hex[:6]}",
                                    "isolation.level": "read_uncommitted", "enable.auto.commit": False}))
    out = {}
    try:
        for topic in topics:
            parts = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
            seen = lso = hwm = 0
            for p in parts:
                low, stable = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)
                high = raw.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                lso, hwm = lso + stable, hwm + high
                if high <= low or not count:
                    continue
                consumer.assign([TopicPartition(topic, p, low)])
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    msg = consumer.poll(0.5)
                    if msg is None:
                        if consumer.position([TopicPartition(topic, p)])[0].offset >= stable:
                            break
                        continue
                    if msg.error() is None:
                        seen += 1
            out[topic] = (seen, lso, hwm)
    finally:
        consumer.close()
        raw.close()
    return out


def batch_value(seq: int, split: int, i: int) -> bytes:
    return f"{seq}-{split}-{i}".encode()


def precommit_batch(config: Mapping[str, Any], topic: str, staging_root, pipeline: str, records: Sequence[int],
                    seq: int = 1, order: Sequence[int] | None = None, **writer_options: Any):
    """What batch ``seq``'s Spark tasks leave behind: split ``i`` wrote ``records[i]`` records
    (``batch_value``) into a transaction left open, and exited; the splits wrote one after another in
    ``order`` (split order by default). Returns the vote naming them, in split order."""
    from onceflow.sinks.kafka.handle import vote_payload
    from onceflow.sinks.kafka.writer import TransactionalSplitWriter
    from onceflow.sinks.kafka.staged import staged_uri
    from onceflow.core.batch_id import BatchId
    from onceflow.core.participant import Vote

    batch_id, handles = str(BatchId(seq)), []
    for split in order if order is not None else range(len(records)):
        count = records[split]
        writer = TransactionalSplitWriter(config, pipeline, "out", batch_id, split, topic,
                                          staged_uri(str(staging_root), pipeline, "out", batch_id, split, 1), **writer_options)
        writer.begin()
        for i in range(count):
            writer.write(batch_value(seq, split, i), key=f"k{i}".encode())
        handles.append(writer.precommit())
        writer.abandon()
    return Vote("out", seq, 1, vote_payload(sorted(handles, key=lambda h: h.split)), records=sum(records))
