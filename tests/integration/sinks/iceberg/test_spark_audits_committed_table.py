"""The audit's second reader (audit.table_readers): Spark 4.1 and pyiceberg read the table the
Iceberg sink committed through the same REST catalog and see the same batches, and a view that
misses a batch is named by that batch.

Two batches commit and one is aborted after its vote (test_spark_reads_committed_table's tables);
pyiceberg's view taken after the first commit misses the second batch, rows and snapshot both.
"""

from __future__ import annotations

import uuid

from onceflow.core.participant import Outcome
from onceflow.core.plan import Plan
from onceflow.sinks.iceberg import tables
from onceflow_devkit.audit.table_readers import disagreements, pyiceberg_view, spark_view

from .conftest import PARTITION_BY, SCHEMA, TableUnderTest
from .test_iceberg_sink import PLANNED_AT
from .test_spark_reads_committed_table import ABORTED, COMMITTED, vote_of


def batch_of(row) -> str:
    """The batch a row of these tables is of: its split number's tens (splits 70 and 71 are batch 7's)."""
    return f"{row['split'] // 10:010d}"


def test_spark_and_pyiceberg_see_the_same_batches_and_a_view_missing_one_is_named_by_it(rest_catalog):
    t = TableUnderTest(rest_catalog.properties(), f"spark_audit_{uuid.uuid4().hex[:6]}.counts")
    tables.prepared_table(tables.open_catalog("onceflow_iceberg", t.properties), t.identifier, SCHEMA, PARTITION_BY,
                          "test table")
    (first, first_splits), *later = COMMITTED.items()
    assert t.sink().commit(vote_of(t, first, first_splits)).outcome is Outcome.DONE
    before_the_second = pyiceberg_view(t.table())
    for seq, splits in later:
        result = t.sink().commit(vote_of(t, seq, splits))
        assert result.outcome is Outcome.DONE, result.detail
    for seq, splits in ABORTED.items():
        vote = vote_of(t, seq, splits)  # written and voted, then aborted
        assert t.sink().abort(Plan(pipeline="p", batch_seq=seq, ranges=(), created_at_ms=PLANNED_AT), [vote]).ok

    spark = spark_view(t.properties, t.identifier)  # make test makes the PySpark 4.1 venv before pytest

    assert spark.reader.startswith("Spark 4.1.")
    assert disagreements(pyiceberg_view(t.table()), spark, batch_of) == []
    assert {batch_of(r) for r in spark.rows} == {"0000000007", "0000000008"}  # none of batch 9's rows
    assert [s["onceflow.batch"] for _, s in spark.snapshots] == ["0000000007", "0000000008"]
    missed = disagreements(before_the_second, spark, batch_of)
    assert [d.split(":")[0] for d in missed] == ["batch 0000000008", "batch 0000000008"], missed  # rows, snapshot
    assert "pyiceberg" in missed[0] and "only in Spark 4.1." in missed[0]
