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

Client settings come from the executor's environment (``onceflow.settings``:
``ONCEFLOW_KAFKA_BOOTSTRAP`` / ``ONCEFLOW_KAFKA_CONFIG``, or the embedded
stack), never from options, so no secret ends up in a query plan.
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


@dataclass(frozen=True)
class RangePartition(InputPartition):
    range: dict


class KafkaRangeReader(DataSourceReader):
    def __init__(self, ranges: list[OffsetRange], max_records_per_split: int):
        self.ranges = ranges
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
        from .. import settings
        from ..kafka.reader import read_range

        rng = OffsetRange.from_dict(partition.range)
        config = settings.kafka_broker().config()
        for batch in read_range(config, rng):
            topic = pa.array([rng.topic] * batch.num_rows, pa.string())
            yield pa.RecordBatch.from_arrays(
                [batch.column("key"), batch.column("value"), batch.column("headers"), topic,
                 batch.column("partition"), batch.column("offset"), batch.column("timestamp").cast(pa.timestamp("us"))],
                names=["key", "value", "headers", "topic", "partition", "offset", "timestamp"],
            )


class KafkaRangeDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> KafkaRangeReader:
        raw = self.options.get("ranges")
        if not raw:
            raise ValueError(f"{FORMAT}: option 'ranges' is missing: pass the plan's ranges as JSON")
        ranges = [OffsetRange.from_dict(r) for r in json.loads(raw)]
        split = int(self.options.get("max_records_per_split", DEFAULT_SPLIT))
        return KafkaRangeReader(ranges, split)


def register(spark) -> None:
    spark.dataSource.register(KafkaRangeDataSource)
