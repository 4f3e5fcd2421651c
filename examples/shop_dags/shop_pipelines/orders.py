"""Orders and payments of a shop -> per-customer events, daily sales, order lines, dead letters.

Inputs: two topics. ``shop_orders`` values are JSON
``{"order_id", "customer_id": str, "amount": decimal, "ts": epoch ms, "coupon": str (optional)}``;
``shop_payments`` values are ``{"order_id", "customer_id", "method": str, "ts": epoch ms}``.
A record is malformed when its value is not a JSON object or a field it
needs is missing or not of its type (``coupon`` may be absent). Outputs:

- ``customer_events`` (Kafka ``shop_customer_events``): every order and payment,
  keyed by ``customer_id`` and partitioned as Java producers partition
  (``options={"partitioner": "murmur2"}``), so a Kafka Streams or Flink job can join it with
  other customer-keyed topics partition by partition;
- ``daily_sales`` (Iceberg ``shop.daily_sales``, partitioned by the date column
  ``order_date``): per day and batch, orders, revenue (exact decimal), coupons
  redeemed and payments;
- ``order_lines`` (files): one row per order, with the normalized ``coupon``.
  That column came with a release of this pipeline: batches committed before
  it have no ``coupon`` column, and readers see it as null there;
- ``payments`` (PostgreSQL ``public.shop_payments``, through the sink kind of
  the separate package ``onceflow-postgres-sink``): one row per payment;
- ``shop_dead_letter`` (Kafka): each malformed record with its reason and source.

Every input record lands in exactly one of ``customer_events`` and
``shop_dead_letter``. The transform is deterministic (``onceflow audit``
replays it): decimal sums, no processing times, no random ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onceflow.pipeline.spec import FILES, ICEBERG, KAFKA, PipelineSpec, SinkSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

ORDERS_TOPIC, PAYMENTS_TOPIC = "shop_orders", "shop_payments"
# Field -> Spark type, per topic; the ones a record must have, in the order they are checked.
ORDER_FIELDS = {"order_id": "string", "customer_id": "string", "amount": "decimal(12,2)", "ts": "bigint"}
PAYMENT_FIELDS = {"order_id": "string", "customer_id": "string", "method": "string", "ts": "bigint"}
MAX_TS_MS = 253402300799999
# The columns of order_lines. "coupon" came with the pipeline's second release.
ORDER_LINE_COLUMNS = ("order_id", "customer_id", "amount", "order_date", "ts", "coupon")
CATALOG_CONN_ID = "onceflow_iceberg"  # the Airflow connection of the Iceberg catalog
POSTGRES_CONN_ID = "onceflow_postgres"  # the Airflow connection of the payments table's database

ORDERS = PipelineSpec(
    name="shop_orders",
    topics=(ORDERS_TOPIC, PAYMENTS_TOPIC),
    transform="shop_pipelines.orders:transform",
    sinks=(
        SinkSpec("customer_events", KAFKA, "shop_customer_events", options={"partitioner": "murmur2"}),
        SinkSpec("daily_sales", ICEBERG, "shop.daily_sales", catalog=CATALOG_CONN_ID, partition_by=("order_date",)),
        SinkSpec("order_lines", FILES, "shop/order_lines"),
        SinkSpec("shop_dead_letter", KAFKA, "shop_dead_letter", dead_letter=True),
        SinkSpec("payments", "postgres", "public.shop_payments", options={"connection": POSTGRES_CONN_ID}),
    ),
    input_columns=("key", "value", "topic", "partition", "offset"),
    max_records_per_partition=10_000,
)


def _field(name: str, spark_type: str) -> Column:
    from pyspark.sql import functions as F

    return F.expr(f"try_variant_get(_doc, '$.{name}', '{spark_type}')").alias(name)


def _reason(fields: dict[str, str]) -> Column:
    """Why a record of one topic is malformed, or NULL."""
    from pyspark.sql import functions as F

    reason = F.when(F.col("_doc").isNull(), F.lit("bad_json")).when(
        ~F.expr("schema_of_variant(_doc)").startswith("OBJECT"), F.lit("not_a_json_object"))
    for name in fields:
        reason = reason.when(F.col(name).isNull(), F.lit(f"missing_or_wrong_type:{name}"))
    return reason.when((F.col("ts") < 0) | (F.col("ts") > MAX_TS_MS), F.lit("out_of_range:ts"))


def _parsed(records: DataFrame, topic: str, fields: dict[str, str], optional: dict[str, str]) -> DataFrame:
    from pyspark.sql import functions as F

    doc = records.where(F.col("topic") == topic).withColumn("_doc", F.expr("try_parse_json(cast(value AS string))"))
    parsed = doc.select("key", "value", "topic", "partition", "offset", "_doc",
                        *(_field(n, t) for n, t in {**fields, **optional}.items()))
    return parsed.withColumn("reason", _reason(fields))


def transform(records: DataFrame, batch_id: str) -> dict[str, DataFrame]:
    from pyspark.sql import functions as F

    from .coupons import normalize_coupon

    coupon = F.udf(normalize_coupon, "string")
    orders = _parsed(records, ORDERS_TOPIC, ORDER_FIELDS, {"coupon": "string"})
    payments = _parsed(records, PAYMENTS_TOPIC, PAYMENT_FIELDS, {})
    source = F.struct("topic", "partition", "offset").alias("source")
    good_orders = (orders.where(F.col("reason").isNull())
                   .withColumn("coupon", coupon("coupon"))
                   .withColumn("order_date", F.to_date(F.timestamp_millis("ts"))))
    good_payments = (payments.where(F.col("reason").isNull())
                     .withColumn("order_date", F.to_date(F.timestamp_millis("ts"))))

    def event(frame: DataFrame, kind: str, *fields: str) -> DataFrame:
        body = F.to_json(F.struct(F.lit(kind).alias("kind"), "order_id", "customer_id", *fields, "ts", source,
                                  F.lit(batch_id).alias("batch_id")))
        return frame.select(F.col("customer_id").cast("binary").alias("key"), body.cast("binary").alias("value"))

    customer_events = event(good_orders, "order", "amount", "coupon").unionByName(
        event(good_payments, "payment", "method"))

    daily_sales = (
        good_orders.select("order_date", F.lit(1).alias("o"), "amount", F.col("coupon").isNotNull().cast("int").alias("c"),
                           F.lit(0).alias("p"))
        .unionByName(good_payments.select("order_date", F.lit(0).alias("o"), F.lit(None).cast("decimal(12,2)").alias("amount"),
                                          F.lit(0).alias("c"), F.lit(1).alias("p")))
        .groupBy("order_date")
        .agg(F.sum("o").cast("bigint").alias("orders"), F.coalesce(F.sum("amount"), F.lit(0)).cast("decimal(22,2)").alias("revenue"),
             F.sum("c").cast("bigint").alias("coupons"), F.sum("p").cast("bigint").alias("payments"))
        .withColumn("batch_id", F.lit(batch_id))
    )

    order_lines = good_orders.select(*ORDER_LINE_COLUMNS, F.lit(batch_id).alias("batch_id"))

    dead = orders.unionByName(payments, allowMissingColumns=True).where(F.col("reason").isNotNull()).select(
        "key",
        F.to_json(F.struct("reason", F.col("value").cast("string").alias("payload"),
                           F.base64("value").alias("payload_base64"), "topic", "partition", "offset",
                           F.lit(batch_id).alias("batch_id"))).cast("binary").alias("value"),
    )
    payment_rows = good_payments.select("order_id", "customer_id", "method", "ts", "order_date")
    return {"customer_events": customer_events, "daily_sales": daily_sales, "order_lines": order_lines,
            "shop_dead_letter": dead, "payments": payment_rows}
