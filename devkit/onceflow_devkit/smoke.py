"""Round trips through each embedded service, over its socket.

``onceflow demo`` prints them until the demo pipeline exists; the tests
assert on what they return.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from onceflow_devkit.services.kafka_broker import KafkaBroker
from onceflow_devkit.services.s3 import S3Endpoint


@dataclass(frozen=True)
class KafkaRoundTrip:
    topic: str
    committed_values: list[bytes]
    aborted_values: list[bytes]
    read_committed_values: list[bytes]


def kafka_round_trip(broker: KafkaBroker, records: int = 10, partitions: int = 2, timeout: float = 30.0) -> KafkaRoundTrip:
    """One committed and one aborted transaction, then a read_committed read."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    from onceflow.kafka.admin import ensure_topics

    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.config(), [topic], partitions, timeout)
    producer = Producer(broker.config(**{"transactional.id": f"onceflow-smoke-{topic}"}))
    producer.init_transactions(timeout)
    committed = [f"committed-{i}".encode() for i in range(records)]
    aborted = [f"aborted-{i}".encode() for i in range(records // 2)]
    for values, finish in ((committed, producer.commit_transaction), (aborted, producer.abort_transaction)):
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(topic, value=value, partition=i % partitions)
        producer.flush(timeout)
        finish(timeout)

    consumer = Consumer(
        broker.config(
            **{
                "group.id": f"onceflow-smoke-{topic}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list[bytes] = []
    at_eof: set[int] = set()
    deadline = time.monotonic() + timeout
    # Stop once every partition reported EOF with all committed records in
    # hand; a broker that leaks aborted records shows them before the EOF.
    while time.monotonic() < deadline and not (len(at_eof) == partitions and len(seen) >= records):
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_eof.add(msg.partition())
                continue
            raise RuntimeError(f"consume from {topic} failed: {msg.error()}")
        at_eof.discard(msg.partition())
        seen.append(msg.value())
    consumer.close()
    return KafkaRoundTrip(topic, committed, aborted, seen)


@dataclass(frozen=True)
class S3RoundTrip:
    bucket: str
    key: str
    read_back: bytes
    second_conditional_put_status: int


def s3_round_trip(s3: S3Endpoint, bucket: str | None = None) -> S3RoundTrip:
    """Create-if-absent twice on one key: the second must be refused with 412."""
    from botocore.exceptions import ClientError

    client = s3.client()
    bucket = bucket or f"onceflow-smoke-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    key = "smoke/object.txt"
    client.put_object(Bucket=bucket, Key=key, Body=b"first", IfNoneMatch="*")
    try:
        client.put_object(Bucket=bucket, Key=key, Body=b"second", IfNoneMatch="*")
        status = 200
    except ClientError as exc:
        status = exc.response["ResponseMetadata"]["HTTPStatusCode"]
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    return S3RoundTrip(bucket, key, body, status)


def spark_parquet_round_trip(spark, out_dir: Path, rows: int = 1000) -> tuple[int, int]:
    """A Spark job writes Parquet; pyarrow (not Spark) reads it back.

    Returns (rows written, rows pyarrow read)."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    df = spark.range(rows).withColumn("page", F.concat(F.lit("/p"), (F.col("id") % 7).cast("string")))
    df.write.mode("overwrite").parquet(str(out_dir))
    table = pq.read_table(str(out_dir))
    return rows, table.num_rows
