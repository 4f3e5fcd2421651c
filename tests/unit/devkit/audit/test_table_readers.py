"""Two engines' views of one Iceberg table, compared batch by batch (audit.table_readers): equal
views agree whatever the values' Python types, and each difference names its batch."""

from __future__ import annotations

import datetime as dt

from onceflow_devkit.audit.table_readers import TableView, disagreements

UTC = dt.timezone.utc
WINDOW = dt.datetime(2026, 11, 24, 10, 0, tzinfo=UTC)


def batch_of(row):
    return row.get("batch_id")


def row(batch: str, page: str, views: int, window: dt.datetime = WINDOW) -> dict:
    return {"page": page, "window_start": window, "views": views, "batch_id": batch}


def as_spark_hands_it(rows: list[dict]) -> list[dict]:
    """Spark's reader answers in JSON: timestamps as ISO 8601 strings in UTC."""
    return [{**r, "window_start": r["window_start"].isoformat()} for r in rows]


def summary(batch: str, attempt: int = 1) -> dict:
    return {"onceflow.pipeline": "clickstream", "onceflow.sink": "page_minute_table", "onceflow.batch": batch,
            "onceflow.planned-at": "1790000000000", "onceflow.attempt": str(attempt), "added-records": "2"}


ROWS = [row("0000000001", "/home", 3), row("0000000001", "/cart", 1), row("0000000002", "/home", 2)]
SNAPSHOTS = [(101, summary("0000000001")), (102, summary("0000000002"))]
PYICEBERG = TableView("pyiceberg", ROWS, SNAPSHOTS)


def test_the_same_table_read_by_two_engines_agrees_whatever_the_values_types():
    spark = TableView("Spark", as_spark_hands_it(list(reversed(ROWS))),  # any order, timestamps as text
                      [(101, {**summary("0000000001"), "spark-only-stat": "x"}), (102, summary("0000000002"))])
    assert disagreements(PYICEBERG, spark, batch_of) == []


def test_a_row_of_an_aborted_batch_seen_by_one_engine_names_that_batch():
    spark = TableView("Spark", as_spark_hands_it([*ROWS, row("0000000003", "/home", 5)]), SNAPSHOTS)
    [found] = disagreements(PYICEBERG, spark, batch_of)
    assert found.startswith("batch 0000000003: pyiceberg reads 0 rows, Spark 1;") and "only in Spark's" in found


def test_a_batch_read_twice_or_with_other_values_names_the_batch():
    twice = TableView("Spark", as_spark_hands_it([*ROWS, row("0000000002", "/home", 2)]), SNAPSHOTS)
    assert [d.split(":")[0] for d in disagreements(PYICEBERG, twice, batch_of)] == ["batch 0000000002"]
    other_window = [*ROWS[:2], row("0000000002", "/home", 2, WINDOW + dt.timedelta(minutes=1))]
    moved = TableView("Spark", as_spark_hands_it(other_window), SNAPSHOTS)
    [found] = disagreements(PYICEBERG, moved, batch_of)
    assert found.startswith("batch 0000000002: pyiceberg reads 1 rows, Spark 1;") and "only in pyiceberg's" in found


def test_a_missing_or_extra_snapshot_or_another_attempt_names_the_batch():
    missing = TableView("Spark", as_spark_hands_it(ROWS), SNAPSHOTS[:1])
    assert disagreements(PYICEBERG, missing, batch_of) == [
        "batch 0000000002: snapshots [102 {'onceflow.attempt': '1', 'onceflow.batch': '0000000002', "
        "'onceflow.pipeline': 'clickstream', 'onceflow.planned-at': '1790000000000', "
        "'onceflow.sink': 'page_minute_table'}] in pyiceberg, none in Spark"]
    extra = TableView("Spark", as_spark_hands_it(ROWS), [*SNAPSHOTS, (103, summary("0000000002"))])
    assert [d.split(":")[0] for d in disagreements(PYICEBERG, extra, batch_of)] == ["batch 0000000002"]
    attempt = TableView("Spark", as_spark_hands_it(ROWS), [SNAPSHOTS[0], (102, summary("0000000002", attempt=2))])
    assert [d.split(":")[0] for d in disagreements(PYICEBERG, attempt, batch_of)] == ["batch 0000000002"]


def test_rows_and_snapshots_of_no_batch_are_compared_too():
    other_writer = TableView("Spark", as_spark_hands_it([*ROWS, {"page": "/x", "window_start": WINDOW, "views": 1,
                                                                 "batch_id": None}]),
                             [*SNAPSHOTS, (104, {"added-records": "1"})])
    assert [d.split(":")[0] for d in disagreements(PYICEBERG, other_writer, batch_of)] == ["batch (none)",
                                                                                           "batch (none)"]
