"""The example pipeline: click events -> per-page minute counts, enriched events, dead letters.

Input: one batch of Kafka records from topic ``clicks`` (columns ``key``,
``value`` binary, ``topic``, ``partition``, ``offset``: the spec's
``input_columns``, so headers and timestamps are not read), each
value a JSON event ``{"event_id", "user_id", "page": str, "ts": epoch ms int,
"amount": number}``. Outputs:

- ``page_minute_counts`` (files): ``page``, ``window_start`` (timestamp, 1-minute
  event-time window), ``views``, ``amount_sum``, ``batch_id``. Counts are per
  batch: a window that spans batches has one row per batch; sum them.
- ``page_minute_table`` (iceberg): the same rows as the Iceberg table
  ``clickstream.page_minute_counts`` (partitioned by day), one snapshot per
  batch, for engines that read tables rather than onceflow's manifests.
- ``clicks_enriched`` (Kafka): key ``event_id``; value the event plus
  ``window_start`` (epoch ms), ``batch_id`` and its ``source`` offset.
- ``clicks_dead_letter`` (Kafka): key the record's key; value ``reason``, the
  original payload (text and base64), source topic/partition/offset, batch id.
- ``clicks_table`` (PostgreSQL, only in ``with_table``'s variant: the kind of
  the separate package ``onceflow-postgres-sink``): one row per valid event,
  its fields and its source topic/partition/offset.

Every input record lands in exactly one of ``clicks_enriched`` and
``clicks_dead_letter``: nothing is dropped. A record is malformed when its
value is not JSON, not a JSON object, misses a field (or holds ``null``),
has a field of the wrong JSON type (strings for ids and page, an integer for
``ts``, any number for ``amount``), or has a ``ts`` outside year 1970..9999.
The first failing check is its ``reason``.

Pure DataFrame code on the JVM (Spark driver builds it, executors run it):
the JSON is parsed once into a VARIANT and each field's JSON type is read
from it, so there is no Python UDF on the per-record path, and every
extraction is a ``try_`` function that cannot fail a job under ANSI mode.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from onceflow.pipeline.spec import FILES, ICEBERG, INTERVAL, KAFKA, PipelineSpec, SinkSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

FIELDS = ("event_id", "user_id", "page", "ts", "amount")
# JSON type of each field as schema_of_variant spells it; JSON integers are BIGINT.
ALLOWED_TYPES = {
    "event_id": ("STRING",),
    "user_id": ("STRING",),
    "page": ("STRING",),
    "ts": ("BIGINT",),
    "amount": ("BIGINT", "DOUBLE", "DECIMAL"),
}
EXTRACT_AS = {"event_id": "string", "user_id": "string", "page": "string", "ts": "bigint", "amount": "double"}
MAX_TS_MS = 253402300799999  # 9999-12-31T23:59:59.999Z, the last instant Spark timestamps hold
WINDOW_MS = 60_000
# The Airflow connection of the Iceberg catalog (the dev kit defines it on the embedded stack).
CATALOG_CONN_ID = "onceflow_iceberg"

CLICKSTREAM = PipelineSpec(
    name="clickstream",
    topics=("clicks",),
    transform="onceflow_examples.clickstream:transform",
    sinks=(
        SinkSpec("page_minute_counts", FILES, "clickstream/page_minute_counts"),
        SinkSpec("page_minute_table", ICEBERG, "clickstream.page_minute_counts", catalog=CATALOG_CONN_ID,
                 partition_by=("day(window_start)",)),
        SinkSpec("clicks_enriched", KAFKA, "clicks_enriched"),
        SinkSpec("clicks_dead_letter", KAFKA, "clicks_dead_letter", dead_letter=True),
    ),
    input_columns=("key", "value", "topic", "partition", "offset"),
)


# The same transform as an interval pipeline: each hourly DAG run reads the
# clicks stamped in its hour (Kafka record timestamps), so hours can be
# backfilled and run side by side. Its own outputs: pipelines never share one.
# Its Kafka outputs are keyed by event id and source record, so their consumers
# can deduplicate: a reprocessed hour may publish its records again (republish).
CLICKSTREAM_HOURLY = replace(
    CLICKSTREAM,
    name="clickstream_hourly",
    batches=INTERVAL,
    schedule="@hourly",
    max_records_per_partition=None,  # an interval batch is its interval, whatever its size
    sinks=(
        SinkSpec("page_minute_counts", FILES, "clickstream_hourly/page_minute_counts"),
        SinkSpec("page_minute_table", ICEBERG, "clickstream_hourly.page_minute_counts", catalog=CATALOG_CONN_ID,
                 partition_by=("day(window_start)",)),
        SinkSpec("clicks_enriched", KAFKA, "clicks_hourly_enriched", republish=True),
        SinkSpec("clicks_dead_letter", KAFKA, "clicks_hourly_dead_letter", dead_letter=True, republish=True),
    ),
)


def with_table(spec: PipelineSpec, connection: str, target: str = "public.clicks") -> PipelineSpec:
    """``spec`` with one more output, ``clicks_table``: each valid event as a row of a PostgreSQL
    table, through the sink kind ``postgres`` (examples/postgres_sink), whose Airflow connection
    is ``connection``. A function, not a constant: the kind is another package's, which a user of
    this example may not have installed."""
    table = SinkSpec("clicks_table", "postgres", target, splits=2, options={"connection": connection})
    return replace(spec, transform="onceflow_examples.clickstream:transform_with_table", sinks=(*spec.sinks, table))


def _json_type(name: str) -> Column:
    """schema_of_variant of the field: NULL if absent, 'VOID' if JSON null."""
    from pyspark.sql import functions as F

    return F.expr(f"schema_of_variant(variant_get(_doc, '$.{name}', 'variant'))")


def _reason() -> Column:
    """Why a record is malformed, or NULL if it is a valid event."""
    from pyspark.sql import functions as F

    doc_type = F.expr("schema_of_variant(_doc)")
    reason = F.when(F.col("_doc").isNull(), F.lit("bad_json")).when(
        ~doc_type.startswith("OBJECT"), F.lit("not_a_json_object")
    )
    for name in FIELDS:
        json_type = F.col(f"_type_{name}")
        allowed = F.lit(False)
        for prefix in ALLOWED_TYPES[name]:
            allowed = allowed | json_type.startswith(prefix)
        reason = reason.when(json_type.isNull() | (json_type == "VOID"), F.lit(f"missing_field:{name}"))
        reason = reason.when(~allowed, F.lit(f"wrong_type:{name}"))
    ts = F.expr("try_variant_get(_doc, '$.ts', 'bigint')")
    return reason.when((ts < 0) | (ts > MAX_TS_MS), F.lit("out_of_range:ts"))


def classify(records: DataFrame) -> DataFrame:
    """The input records with ``_doc`` (parsed VARIANT) and ``reason`` (NULL if valid)."""
    from pyspark.sql import functions as F

    parsed = records.withColumn("_doc", F.expr("try_parse_json(cast(value AS string))"))
    parsed = parsed.select("*", *[_json_type(n).alias(f"_type_{n}") for n in FIELDS])
    return parsed.withColumn("reason", _reason())


def _events(classified: DataFrame, batch_id: str) -> DataFrame:
    from pyspark.sql import functions as F

    fields = [F.expr(f"try_variant_get(_doc, '$.{n}', '{EXTRACT_AS[n]}')").alias(n) for n in FIELDS]
    events = classified.where(F.col("reason").isNull()).select(*fields, "topic", "partition", "offset")
    return events.withColumn("window_start_ms", F.col("ts") - F.pmod(F.col("ts"), F.lit(WINDOW_MS))).withColumn(
        "batch_id", F.lit(batch_id)
    )


def transform(records: DataFrame, batch_id: str) -> dict[str, DataFrame]:
    """The outputs of one batch, keyed by output name."""
    classified = classify(records)
    return _outputs(classified, _events(classified, batch_id), batch_id)


def _outputs(classified: DataFrame, events: DataFrame, batch_id: str) -> dict[str, DataFrame]:
    from pyspark.sql import functions as F

    counts = (
        events.groupBy("page", F.expr("timestamp_millis(window_start_ms)").alias("window_start"))
        .agg(F.count(F.lit(1)).alias("views"), F.sum("amount").alias("amount_sum"))
        .withColumn("batch_id", F.lit(batch_id))
    )

    enriched = events.select(
        F.col("event_id").cast("binary").alias("key"),
        F.to_json(
            F.struct(
                *FIELDS,
                F.col("window_start_ms").alias("window_start"),
                "batch_id",
                F.struct("topic", "partition", "offset").alias("source"),
            )
        ).cast("binary").alias("value"),
    )

    dead = classified.where(F.col("reason").isNotNull()).select(
        F.col("key"),
        F.to_json(
            F.struct(
                "reason",
                F.col("value").cast("string").alias("payload"),
                F.base64("value").alias("payload_base64"),
                "topic",
                "partition",
                "offset",
                F.lit(batch_id).alias("batch_id"),
            )
        ).cast("binary").alias("value"),
    )
    return {"page_minute_counts": counts, "page_minute_table": counts, "clicks_enriched": enriched, "clicks_dead_letter": dead}


def transform_with_table(records: DataFrame, batch_id: str) -> dict[str, DataFrame]:
    """``transform``'s outputs and ``clicks_table``: the valid events as rows, with their source."""
    classified = classify(records)
    events = _events(classified, batch_id)
    return {**_outputs(classified, events, batch_id), "clicks_table": events.select(*FIELDS, "topic", "partition", "offset")}
