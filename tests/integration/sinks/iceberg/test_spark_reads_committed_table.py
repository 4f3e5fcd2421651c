"""A second engine reads what the Iceberg sink committed: Spark 4.1 with Iceberg's Spark runtime,
through the same REST catalog, in a PySpark environment of its own (Iceberg's runtime does not
load into the PySpark the project pins: docs/iceberg.md).

Two batches commit and one is aborted after its vote; Spark then sees every committed batch's
rows once and none of the aborted one, one snapshot per batch with its batch id in the summary,
and, read ``VERSION AS OF`` the first batch's snapshot, the first batch's rows alone.
"""

from __future__ import annotations

import uuid

import pytest

from onceflow.core.participant import Outcome
from onceflow.core.plan import Plan
from onceflow.sinks.iceberg import tables
from onceflow.sinks.iceberg.participant import BATCH_KEY
from onceflow_devkit.services.pyspark_env import PYSPARK, pyspark_env
from onceflow_devkit.services.spark_table_reader import read_table

from .conftest import PARTITION_BY, SCHEMA, TableUnderTest
from .test_iceberg_sink import PLANNED_AT, write

# Each batch's splits, by their split number (the rows' ``split`` column), and their row counts.
COMMITTED = {7: {70: 5, 71: 3}, 8: {80: 2}}
ABORTED = {9: {90: 4}}


@pytest.fixture(scope="session")
def spark_4_1():
    """The PySpark 4.1 environment, made once per session (about a minute from PyPI and Maven Central
    on a clean machine; a fraction of a second once made)."""
    return pyspark_env()


def vote_of(t: TableUnderTest, seq: int, splits: dict[int, int]):
    files = [f for split, n in splits.items() for f in write(t, seq, 1, split, n)]
    return t.sink().vote_for(seq, PLANNED_AT, 1, t.table().location(), files)


def rows_of(batches: dict[int, dict[int, int]]) -> list[tuple[int, int]]:
    return sorted((split, i) for splits in batches.values() for split, n in splits.items() for i in range(n))


def test_spark_reads_every_committed_batch_once_no_aborted_one_and_each_batchs_snapshot(rest_catalog, spark_4_1):
    t = TableUnderTest(rest_catalog.properties(), f"spark_read_{uuid.uuid4().hex[:6]}.counts")
    tables.prepared_table(tables.open_catalog("onceflow_iceberg", t.properties), t.identifier, SCHEMA, PARTITION_BY,
                          "test table")
    for seq, splits in COMMITTED.items():
        result = t.sink().commit(vote_of(t, seq, splits))
        assert result.outcome is Outcome.DONE, result.detail
    for seq, splits in ABORTED.items():
        vote = vote_of(t, seq, splits)  # written and voted, then aborted
        assert t.sink().abort(Plan(pipeline="p", batch_seq=seq, ranges=(), created_at_ms=PLANNED_AT), [vote]).ok
    first = {s.summary[BATCH_KEY]: s.snapshot_id for s in t.table().metadata.snapshots}["0000000007"]

    read = read_table(t.properties, t.identifier, as_of=[first], env=spark_4_1)

    assert read.pyspark == PYSPARK and PYSPARK.startswith("4.1.")
    assert sorted((r["split"], r["i"]) for r in read.rows) == rows_of(COMMITTED)  # each once, none of batch 9
    assert [(s["operation"], s["summary"]["onceflow.batch"]) for s in read.snapshots] == [
        ("append", "0000000007"), ("append", "0000000008")]
    assert read.snapshots[0]["snapshot_id"] == first and read.snapshots[1]["parent_id"] == first
    assert sorted((r["split"], r["i"]) for r in read.as_of[first]) == rows_of({7: COMMITTED[7]})
    assert {r["day"][:10] for r in read.rows} == {"2026-11-24", "2026-11-25"}  # timestamps come back in UTC
