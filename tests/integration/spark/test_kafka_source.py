"""``onceflow_kafka_range`` in real local Spark against the real broker: all columns, or a projection."""

from __future__ import annotations

import json

import pytest

from onceflow.kafka.offsets import KafkaOffsetSource
from onceflow.core.plan import OffsetRange
from onceflow.pipeline.runtime import Deployment
from onceflow.sources.kafka.data_source import register
from onceflow.sources.kafka.columns import INPUT_COLUMNS
from tests.integration.kafka.helpers import create_topic, produce_txn


@pytest.fixture
def ranges(kafka_broker):
    """Two partitions of committed records, with headers; the ranges cover all of them."""
    config = kafka_broker.config()
    topic = create_topic(config, partitions=2, prefix="source")
    for p in (0, 1):
        produce_txn(config, topic, [f"p{p}-{i}".encode() for i in range(7)], p, True)
    with KafkaOffsetSource(config) as source:
        stable = source.last_stable_offsets(source.partitions([topic]))
    return [OffsetRange(topic, tp.partition, 0, end) for tp, end in stable.items()]


def _read(spark, kafka_broker, ranges, columns: str | None = None):
    register(spark)
    reader = (
        spark.read.format("onceflow_kafka_range")
        .option("ranges", json.dumps([r.to_dict() for r in ranges]))
        .option("deployment", Deployment("file:///unused", kafka_broker).to_option())
        .option("max_records_per_split", "3")  # several sub-ranges per partition
    )
    if columns is not None:
        reader = reader.option("columns", columns)
    return reader.load()


def test_the_source_reads_every_committed_record_of_the_ranges_once(spark, kafka_broker, ranges):
    df = _read(spark, kafka_broker, ranges)
    assert tuple(df.columns) == INPUT_COLUMNS
    rows = df.collect()
    assert sorted(r["value"] for r in rows) == sorted(f"p{p}-{i}".encode() for p in (0, 1) for i in range(7))
    assert {r["topic"] for r in rows} == {ranges[0].topic}
    assert len({(r["partition"], r["offset"]) for r in rows}) == 14


def test_a_projection_returns_the_same_records_with_only_the_columns_named(spark, kafka_broker, ranges):
    def records(df):
        return sorted((r["partition"], r["offset"], r["value"], r["topic"]) for r in df.collect())

    projected = _read(spark, kafka_broker, ranges, "offset, value,partition,topic")
    assert projected.columns == ["value", "topic", "partition", "offset"]  # INPUT_COLUMNS order
    assert records(projected) == records(_read(spark, kafka_broker, ranges))
    assert _read(spark, kafka_broker, ranges, "topic").count() == 14


def test_an_unknown_column_fails_naming_the_option_and_the_valid_columns(spark, kafka_broker, ranges):
    with pytest.raises(Exception, match=r"option 'columns'.*'headerz'.*key, value, headers, topic, partition, offset, timestamp"):
        _read(spark, kafka_broker, ranges, "value,headerz").collect()
