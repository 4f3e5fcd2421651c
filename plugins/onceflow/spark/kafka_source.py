"""``onceflow_kafka_range``: the planned Kafka ranges of a batch as a DataFrame.

Call sequence (Spark's DataSourceReader contract)::

    KafkaRangeDataSource.schema()       driver: the record columns
    KafkaRangeReader.partitions()       driver: one InputPartition per sub-range
                                        (ranges split at ``max_records_per_split``)
    KafkaRangeReader.read(partition)    executor: yields pyarrow RecordBatches of
                                        exactly [start, end) of its sub-range,
                                        read_committed

Usage::

    register(spark)
    df = (spark.read.format("onceflow_kafka_range")
          .option("ranges", json.dumps([r.to_dict() for r in plan.ranges]))
          .load())

Client settings come from the ``deployment`` option
(``Deployment.to_option()``: no secrets) plus secrets from the executor's
environment, so no secret ends up in a query plan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..protocol.plan import OffsetRange

FORMAT = "onceflow_kafka_range"
SCHEMA = (
    "key binary, value binary, headers array<struct<key: string, value: binary>>, "
    "topic string, partition int, offset long, timestamp timestamp"
)
DEFAULT_SPLIT = 250_000
_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
# Exactly what Spark expects for SCHEMA (list items are named "element";
# timestamps are UTC microseconds).
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.field("element", _HEADER))),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)


@dataclass(frozen=True)
class RangePartition(InputPartition):
    range: dict


class KafkaRangeReader(DataSourceReader):
    def __init__(self, ranges: list[OffsetRange], max_records_per_split: int, deployment: str):
        self.ranges = ranges
        self.deployment = deployment
        self.max_records_per_split = max_records_per_split

    def partitions(self) -> list[RangePartition]:
        from ..kafka.reader import split_range

        parts = [
            RangePartition(sub.to_dict())
            for rng in self.ranges
            if rng.size
            for sub in split_range(rng, self.max_records_per_split)
        ]
        # Spark needs at least one partition; an empty batch reads nothing.
        return parts or [RangePartition({})]

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        if not partition.range:
            return
        from ..kafka.reader import read_range
        from ..runtime import Deployment

        rng = OffsetRange.from_dict(partition.range)
        config = Deployment.from_option(self.deployment).kafka.config()
        for batch in read_range(config, rng):
            topic = pa.array([rng.topic] * batch.num_rows, pa.string())
            yield pa.RecordBatch.from_arrays(
                [batch.column("key"), batch.column("value"), batch.column("headers").cast(ARROW_SCHEMA.field("headers").type),
                 topic, batch.column("partition"), batch.column("offset"),
                 batch.column("timestamp").cast(ARROW_SCHEMA.field("timestamp").type)],
                schema=ARROW_SCHEMA,
            )


class KafkaRangeDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> KafkaRangeReader:
        raw = self.options.get("ranges")
        deployment = self.options.get("deployment")
        if not raw or not deployment:
            raise ValueError(f"{FORMAT}: options 'ranges' (the plan's ranges as JSON) and 'deployment' "
                             "(Deployment.to_option()) are required")
        ranges = [OffsetRange.from_dict(r) for r in json.loads(raw)]
        split = int(self.options.get("max_records_per_split", DEFAULT_SPLIT))
        return KafkaRangeReader(ranges, split, deployment)


def register(spark) -> None:
    spark.dataSource.register(KafkaRangeDataSource)
