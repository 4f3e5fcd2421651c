"""Commits through a REST catalog that loses an answer, or whose table another writer changes:
an append racing the commit, a new optional column, a renamed column, a compaction.

The catalog is the dev kit's REST catalog; between it and the sink runs, where a test needs it,
an ``AnswerDroppingProxy``, which forwards a commit to the catalog and then closes the
connection without the catalog's answer: the commit is applied and the sink cannot tell.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from onceflow.core.participant import Outcome
from onceflow.sinks.iceberg import tables
from onceflow.sinks.iceberg.participant import IcebergTableSink
from onceflow_devkit.services.answer_dropping_proxy import AnswerDroppingProxy

from .conftest import PARTITION_BY, SCHEMA, TableUnderTest
from .test_iceberg_sink import DAY, SEQ, voted


@pytest.fixture
def proxy(rest_catalog):
    proxy = AnswerDroppingProxy(rest_catalog.uri).start()
    yield proxy
    proxy.stop()


def table_behind(proxy, rest_catalog, name: str) -> tuple[TableUnderTest | None, TableUnderTest]:
    """The same new table twice: seen through ``proxy`` (the sink's; None without one), and directly (the truth)."""
    direct = TableUnderTest(rest_catalog.properties(), f"{name}_{uuid.uuid4().hex[:6]}.counts")
    tables.prepared_table(tables.open_catalog("onceflow_iceberg", direct.properties), direct.identifier, SCHEMA,
                          PARTITION_BY, "test table")
    return (TableUnderTest({**direct.properties, "uri": proxy.uri}, direct.identifier) if proxy else None), direct


def test_a_commit_whose_answer_was_lost_is_found_by_its_batch_id_and_not_repeated(proxy, rest_catalog):
    sink_side, truth = table_behind(proxy, rest_catalog, "lost_answer")
    vote = voted(sink_side)
    proxy.drop_answers(1)

    first = sink_side.sink().commit(vote)
    assert len(proxy.dropped) == 1, "the commit reached the catalog through the proxy"
    assert first.outcome is Outcome.RETRY_LATER, first.detail  # it cannot tell: the coordinator asks again
    assert truth.batch_snapshots() == ["0000000007"] and truth.rows() == 8  # the catalog did apply it

    second = sink_side.sink().commit(vote)
    assert second.outcome is Outcome.ALREADY_DONE, second.detail
    assert truth.batch_snapshots() == ["0000000007"] and truth.rows() == 8  # not appended twice


def test_a_commit_that_loses_to_another_writers_append_retries_on_the_new_table_once(proxy, rest_catalog, monkeypatch):
    """Another writer appends between the sink's read of the table and its commit: the catalog
    refuses the commit (its base is stale); the sink reads the table again and commits once,
    the other writer's rows kept."""
    sink_side, truth = table_behind(proxy, rest_catalog, "second_writer")
    vote = voted(sink_side)
    original = IcebergTableSink._append
    raced = []

    def append_after_another_writer(self, table, vote, replaced):
        if not raced:
            raced.append(True)
            other = truth.table()
            other.append(pa.table({"split": [9], "i": [0], "day": [DAY]}, schema=SCHEMA))
        return original(self, table, vote, replaced)

    monkeypatch.setattr(IcebergTableSink, "_append", append_after_another_writer)
    result = sink_side.sink().commit(vote)
    assert result.outcome is Outcome.DONE, result.detail
    snapshots = truth.table().metadata.snapshots
    assert [s.summary["onceflow.batch"] for s in snapshots] == [None, "0000000007"]
    assert truth.rows() == 8 + 1 and vote.batch_seq == SEQ and len(raced) == 1


def test_a_new_optional_column_from_another_writer_lets_the_next_batch_commit(rest_catalog):
    _, table = table_behind(None, rest_catalog, "new_column")
    from pyiceberg.types import StringType

    with table.table().update_schema() as update:
        update.add_column("note", StringType())
    catalog = tables.open_catalog("onceflow_iceberg", table.properties)
    tables.prepared_table(catalog, table.identifier, SCHEMA, PARTITION_BY, "sink 'counts'")  # the job's check passes
    result = table.sink().commit(voted(table))
    assert result.outcome is Outcome.DONE, result.detail
    scanned = table.table().scan().to_arrow()
    assert scanned.num_rows == 8 and scanned["note"].null_count == 8


def test_a_column_another_writer_renamed_fails_the_batch_before_writing_naming_the_column(rest_catalog):
    from onceflow.config.settings import ConfigurationError

    _, table = table_behind(None, rest_catalog, "renamed_column")
    with table.table().update_schema() as update:
        update.rename_column("i", "j")
    catalog = tables.open_catalog("onceflow_iceberg", table.properties)
    with pytest.raises(ConfigurationError, match=r"sink 'counts': the output's columns do not fit table .*more columns: i\b"):
        tables.prepared_table(catalog, table.identifier, SCHEMA, PARTITION_BY, "sink 'counts'")


def test_after_another_writer_compacts_the_table_a_batch_commits_and_a_repeated_commit_is_not_appended(rest_catalog):
    """Another writer rewrites every data file into one (a compaction through pyiceberg): the next
    batch commits beside it, and a repeated commit of the compacted batch, found by its batch id,
    appends nothing though its files are no longer the table's."""
    _, table = table_behind(None, rest_catalog, "compacted")
    first = voted(table)
    assert table.sink().commit(first).outcome is Outcome.DONE
    compacted = table.table()
    compacted.overwrite(compacted.scan().to_arrow())  # the same rows, in new files
    assert table.rows() == 8 and not {f["path"] for f in first.payload["files"]} & {
        task.file.file_path for task in table.table().scan().plan_files()}

    second = voted(table, seq=SEQ + 1)
    assert table.sink().commit(second).outcome is Outcome.DONE
    again = table.sink().commit(first)
    assert again.outcome is Outcome.ALREADY_DONE, again.detail
    assert table.rows() == 16 and table.batch_snapshots() == ["0000000007", "0000000008"]
