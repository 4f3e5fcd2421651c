"""The PySpark program ``services.spark_table_reader`` runs with the second PySpark's interpreter
(``services.pyspark_env``): it reads one Iceberg table through Spark's ``SparkCatalog`` and writes
what it saw as JSON; asked to, it first compacts the table with Iceberg's own Spark procedure
``rewrite_data_files``, as another writer's maintenance job would. Standard library and PySpark
only: it runs as a file, without onceflow.

    python spark_table_read.py <request.json> <answer.json>

The request: ``catalog`` (Spark catalog settings, ``spark.sql.catalog.<name>...``), ``jars``,
``table`` (``<name>.<namespace>.<table>``), ``as_of`` (snapshot ids) and ``rewrite`` (true: compact
every data file first). The answer: ``rewrite`` (the procedure's result row, or null), ``rows`` (the
current snapshot's), ``snapshots`` (the table's ``snapshots`` metadata table, oldest first) and
``as_of`` (each snapshot id's rows, read with ``VERSION AS OF``); timestamps as ISO 8601 in UTC.
"""

import datetime as dt
import json
import sys


def plain(value):
    if isinstance(value, dt.datetime):  # the process runs with TZ=UTC, so PySpark's naive datetimes are UTC
        return (value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)).isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def rows_of(frame) -> list:
    return [row.asDict(recursive=True) for row in frame.collect()]


def rewrite_data_files(spark, table: str) -> dict:
    """Every data file rewritten (``rewrite-all``: even a partition of one small file), one commit."""
    catalog, identifier = table.split(".", 1)
    (result,) = spark.sql(f"CALL {catalog}.system.rewrite_data_files(table => '{identifier}', "
                          "options => map('rewrite-all', 'true'))").collect()
    return result.asDict()


def read(spark, table: str, as_of: list) -> dict:
    snapshots = spark.sql(f"SELECT snapshot_id, parent_id, operation, summary, committed_at FROM {table}.snapshots "
                          "ORDER BY committed_at, snapshot_id")
    return {"rows": rows_of(spark.table(table)), "snapshots": rows_of(snapshots),
            "as_of": {str(snapshot_id): rows_of(spark.sql(f"SELECT * FROM {table} VERSION AS OF {int(snapshot_id)}"))
                      for snapshot_id in as_of}}


def main(request_path: str, answer_path: str) -> None:
    from pyspark.sql import SparkSession

    with open(request_path) as f:
        request = json.load(f)
    builder = (SparkSession.builder.master("local[1]").appName("onceflow-spark-table-read")
               .config("spark.jars", ",".join(request["jars"]))
               .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.memory", "512m").config("spark.sql.shuffle.partitions", "1")
               # A short program: the C1 compiler alone and the serial collector start the JVM sooner.
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"))
    if request.get("rewrite"):  # CALL ... system.<procedure> is parsed by Iceberg's SQL extensions
        builder = builder.config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
    for key, value in request["catalog"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        rewritten = rewrite_data_files(spark, request["table"]) if request.get("rewrite") else None
        answer = {"rewrite": rewritten, **read(spark, request["table"], request["as_of"])}
    finally:
        spark.stop()
    with open(answer_path, "w") as f:
        json.dump(answer, f, default=plain)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
