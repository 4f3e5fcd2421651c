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
          .option("deployment", deployment.to_option())
          .option("columns", "key,value,topic,partition,offset")   # optional: all by default
          .load())

``columns`` is the projection: Spark's Python data sources are not told
which columns a query uses, and reading a field costs a call into the Kafka
client per record (``headers`` the most), so a job that knows its columns
names them (``PipelineSpec.input_columns``).

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

from onceflow.kafka.reader import RANGE_FORMAT as FORMAT  # the name this data source registers under
from onceflow.core.plan import OffsetRange
from onceflow.sources.kafka.columns import INPUT_COLUMNS, check_input_columns
from onceflow.config.deployment import Deployment
from onceflow.kafka.reader import read_range, split_range

_DDL = {
    "key": "binary",
    "value": "binary",
    "headers": "array<struct<key: string, value: binary>>",
    "topic": "string",
    "partition": "int",
    "offset": "long",
    "timestamp": "timestamp",
}
SCHEMA = ", ".join(f"{name} {_DDL[name]}" for name in INPUT_COLUMNS)
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
    def __init__(self, ranges: list[OffsetRange], max_records_per_split: int, deployment: str, columns: tuple[str, ...]):
        self.ranges = ranges
        self.deployment = deployment
        self.max_records_per_split = max_records_per_split
        self.columns = columns

    def partitions(self) -> list[RangePartition]:
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
        rng = OffsetRange.from_dict(partition.range)
        config = Deployment.from_option(self.deployment).kafka.config()
        schema = pa.schema([ARROW_SCHEMA.field(c) for c in self.columns])
        # The topic is the range's; offsets stand in when only the topic is asked for.
        fields = [c for c in self.columns if c != "topic"] or ["offset"]
        for batch in read_range(config, rng, fields=fields):
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([rng.topic] * batch.num_rows, pa.string())
                    if c == "topic"
                    else batch.column(c).cast(schema.field(c).type)
                    for c in self.columns
                ],
                schema=schema,
            )


class KafkaRangeDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return ", ".join(f"{c} {_DDL[c]}" for c in self._columns())

    def _columns(self) -> tuple[str, ...]:
        raw = self.options.get("columns")
        return check_input_columns(raw.split(",") if raw else INPUT_COLUMNS, f"{FORMAT} option 'columns'")

    def reader(self, schema) -> KafkaRangeReader:
        raw = self.options.get("ranges")
        deployment = self.options.get("deployment")
        if not raw or not deployment:
            raise ValueError(f"{FORMAT}: options 'ranges' (the plan's ranges as JSON) and 'deployment' "
                             "(Deployment.to_option()) are required")
        ranges = [OffsetRange.from_dict(r) for r in json.loads(raw)]
        split = int(self.options.get("max_records_per_split", DEFAULT_SPLIT))
        return KafkaRangeReader(ranges, split, deployment, self._columns())


def register(spark) -> None:
    spark.dataSource.register(KafkaRangeDataSource)
