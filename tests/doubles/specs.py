"""Pipeline specs for the library's unit tests, independent of the example
package: one output of each built-in kind plus a dead-letter output, as an
offsets pipeline (ORDERS) and as an interval pipeline (ORDERS_HOURLY)."""

from __future__ import annotations

from dataclasses import replace

from onceflow.pipeline.spec import FILES, ICEBERG, INTERVAL, KAFKA, PipelineSpec, SinkSpec

CATALOG = "lake"

ORDERS = PipelineSpec(
    name="orders",
    topics=("orders",),
    transform="tests.doubles.specs:transform",
    sinks=(
        SinkSpec("daily_revenue", FILES, "orders/daily_revenue"),
        SinkSpec("revenue_table", ICEBERG, "sales.daily_revenue", catalog=CATALOG, partition_by=("day(day)",)),
        SinkSpec("orders_clean", KAFKA, "orders_clean"),
        SinkSpec("orders_dead_letter", KAFKA, "orders_dead_letter", dead_letter=True),
    ),
    input_columns=("key", "value", "topic", "partition", "offset"),
)

# Kafka outputs keyed so that consumers deduplicate: a reprocessed hour may publish again (republish).
ORDERS_HOURLY = replace(
    ORDERS,
    name="orders_hourly",
    batches=INTERVAL,
    schedule="@hourly",
    max_records_per_partition=None,
    sinks=(
        SinkSpec("daily_revenue", FILES, "orders_hourly/daily_revenue"),
        SinkSpec("revenue_table", ICEBERG, "sales.hourly_revenue", catalog=CATALOG, partition_by=("day(day)",)),
        SinkSpec("orders_clean", KAFKA, "orders_hourly_clean", republish=True),
        SinkSpec("orders_dead_letter", KAFKA, "orders_hourly_dead_letter", dead_letter=True, republish=True),
    ),
)


def transform(records, batch_id):
    """Never run by the unit tests; a spec must name an importable transform."""
    raise NotImplementedError("the unit tests' specs are not run on Spark")
