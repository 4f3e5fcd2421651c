"""The audit's Spark SQL reads a record's batch and split as the commit's Python does, in every format."""

from __future__ import annotations

from onceflow.sinks.kafka.headers import FORMATS, REPAIR, batch_and_split, record_headers, sql_batch_and_split
from onceflow.sinks.kafka.ids import transactional_id
from onceflow.kafka.reader import HEADERS_TYPE


def test_spark_sql_and_python_agree_on_every_format_and_on_foreign_records(spark):
    import pyarrow as pa

    txn = transactional_id("p", "out", 4)
    rows = [record_headers("0000000009", 4, txn, f) for f in sorted(FORMATS)]
    rows += [[*record_headers("0000000010", 5, txn), REPAIR, ("user", b"a/b/c")], [("trace", b"1")], [],
             [("onceflow", b"someone else's"), ("trace", b"1")]]
    table = pa.table({"i": list(range(len(rows))),
                      "headers": pa.array([[{"key": k, "value": v} for k, v in r] for r in rows], HEADERS_TYPE)})
    batch_of, split_of = sql_batch_and_split("headers")
    got = spark.createDataFrame(table.to_pandas()).selectExpr("i", f"{batch_of} as batch", f"{split_of} as split").collect()
    assert {r["i"]: (r["batch"], r["split"]) for r in got} == {
        i: batch_and_split(r) or (None, None) for i, r in enumerate(rows)}
    assert [batch_and_split(r) for r in rows] == [("0000000009", "4")] * len(FORMATS) + [("0000000010", "5"), None, None, None]
