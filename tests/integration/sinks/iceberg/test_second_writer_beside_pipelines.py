"""Another writer of the table beside whole pipeline batches, not only at the sink: the clickstream
pipeline (plan, the Spark job's vote, commit, as the Airflow tasks run them, without Airflow) writes
``page_minute_counts`` both as files and as an Iceberg table through the dev kit's REST catalog,
while another writer changes the table between its batches and during them: after the job's vote,
at the sink's last step before its snapshot (``iceberg.commit.before_snapshot``), where the catalog
then refuses onceflow's commit and the sink retries on the new table.

The other writer appends rows, adds optional columns, and compacts the table with Spark's own
``rewrite_data_files`` (Spark 4.1, ``services.spark_table_reader``). Every batch's rows are in the
table exactly once (the file output is the truth), read by pyiceberg and by Spark; the other
writer's rows are intact; each batch has one snapshot with its batch id. A commit whose answer the
catalog lost (``services.answer_dropping_proxy``) is found again by its batch id when the commit
task runs again, and the replay audit finds every record once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from contextlib import contextmanager

import pyarrow as pa
import pytest

from onceflow.core import faults
from onceflow.core.errors import RetryLater
from onceflow.core.participant import Outcome
from onceflow.sinks import sink_kind
from onceflow.sinks.files import read_committed
from onceflow.sinks.iceberg import tables
from onceflow.sinks.iceberg.participant import BATCH_KEY, BEFORE_SNAPSHOT
from onceflow.pipeline.runtime import PipelineRuntime
from onceflow.spark.batch_job import run_batch
from onceflow.storage import warehouse_storage
from onceflow_devkit.services.answer_dropping_proxy import AnswerDroppingProxy
from onceflow_devkit.services.iceberg_catalog import CONN_ID
from tests.integration.spark.test_batch_job import produce
from tests.integration.spark.test_iceberg_datasource import COLUMNS, iceberg_pipeline

TABLE = "page_minute_table"
OTHER_PAGE = "/another-writer"  # the other writer's rows, told apart from the pipeline's by their page
WINDOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.timezone.utc)


def table_of(runtime):
    return tables.open_catalog(CONN_ID, runtime.deployment.catalogs[CONN_ID]).load_table(runtime.spec.sink(TABLE).target)


def append_other_rows(runtime, n: int) -> list[int]:
    """The other writer appends ``n`` rows of its own (``views`` numbers them) with pyiceberg."""
    table = table_of(runtime)
    first = sum(1 for _ in other_rows(table.scan().to_arrow()))
    views = list(range(first, first + n))
    rows = [{"page": OTHER_PAGE, "window_start": WINDOW, "views": v, "amount_sum": 0.0, "batch_id": "other"} for v in views]
    table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
    return views


def add_optional_column(runtime, name: str) -> None:
    from pyiceberg.types import StringType

    with table_of(runtime).update_schema() as update:
        update.add_column(name, StringType())


def other_rows(arrow) -> list[int]:
    return sorted(r["views"] for r in arrow.select(["page", "views"]).to_pylist() if r["page"] == OTHER_PAGE)


def pipeline_rows(rows) -> list[tuple]:
    return sorted(tuple(r[c] for c in COLUMNS) for r in rows if r["page"] != OTHER_PAGE)


def spark_read_rows(read) -> list[tuple]:
    """The pipeline's rows Spark read (its timestamps come back as ISO 8601 text)."""
    return pipeline_rows([{**r, "window_start": dt.datetime.fromisoformat(r["window_start"])} for r in read.rows])


def written_by_the_pipeline(runtime) -> list[tuple]:
    """Every committed batch's rows as the file output holds them: what the table must hold once."""
    files_uri = sink_kind("files").location(runtime.spec.sink("page_minute_counts"), runtime.deployment.warehouse)
    return pipeline_rows(read_committed(files_uri, warehouse_storage(runtime.deployment)).select(COLUMNS).to_pylist())


def batch_snapshots(runtime) -> list[str | None]:
    """The batch id in each snapshot's summary, oldest first (None: another writer's snapshot)."""
    return [s.summary[BATCH_KEY] for s in table_of(runtime).metadata.snapshots]


@contextmanager
def another_writer_before_the_snapshot(act):
    """``act`` runs once when the sink reaches ``iceberg.commit.before_snapshot``: the table is
    loaded, checked and about to be committed; what ``act`` commits makes that base stale."""
    real, acted = faults.fault_point, []

    def fault_point(name: str) -> None:
        if name == BEFORE_SNAPSHOT and not acted:
            acted.append(act())
        real(name)

    faults.fault_point = fault_point
    try:
        yield acted
    finally:
        faults.fault_point = real


def batch(spark, runtime, run: str, during=None):
    """One batch as the DAG's tasks run it: plan, the Spark job (writes and votes), commit; ``during``
    runs at the sink's last step before its snapshot."""
    coordinator = runtime.coordinator
    with runtime.offset_source() as source:
        plan = coordinator.plan_next(source, runtime.plan_config(), run_id=run)
    run_batch(spark, runtime, plan.batch_seq)
    if during is None:
        status = coordinator.commit(plan.batch_seq)
    else:
        with another_writer_before_the_snapshot(during) as acted:
            status = coordinator.commit(plan.batch_seq)
        assert acted, "the other writer acted during the commit"
    assert status.state.value == "committed"
    runtime.after_commit(plan)
    return plan


@pytest.mark.slow  # 38 s on 2 cores with a warm Spark, 90 s with the machine loaded: two batches
def test_another_writers_appends_and_new_columns_between_and_during_batches_leave_every_batch_once(
        spark, one_kafka_broker, tmp_path, request):
    runtime = iceberg_pipeline(one_kafka_broker, tmp_path, "rest", request)
    topic = runtime.spec.topics[0]
    produce(one_kafka_broker, topic, 300, seed=11)
    batch(spark, runtime, "run-1", during=lambda: append_other_rows(runtime, 2))  # the commit conflicts, retries
    add_optional_column(runtime, "note")
    append_other_rows(runtime, 1)
    produce(one_kafka_broker, topic, 300, seed=12)
    batch(spark, runtime, "run-2", during=lambda: add_optional_column(runtime, "reviewed"))

    snapshots = batch_snapshots(runtime)
    assert snapshots == [None, "0000000001", None, "0000000002"]  # one per batch; a schema change makes none
    scanned = table_of(runtime).scan().to_arrow()
    expected = written_by_the_pipeline(runtime)
    assert expected and pipeline_rows(scanned.to_pylist()) == expected  # every batch's rows, each once
    assert other_rows(scanned) == [0, 1, 2]  # the other writer's rows intact
    assert {"note", "reviewed"} <= set(scanned.column_names) and scanned["reviewed"].null_count == scanned.num_rows


@pytest.mark.slow  # 90 s on 2 cores at load 7: three batches and three Spark 4.1 sessions
def test_spark_compactions_between_and_during_batches_keep_every_batch_once_and_refuse_a_compacted_batchs_replacement(
        spark, one_kafka_broker, tmp_path, request):
    """Spark's ``rewrite_data_files`` rewrites every data file (batch 1's and the other writer's)
    after batch 1's commit, and again after batch 2's vote, before its commit; batch 3 then runs on
    the compacted table. Spark and pyiceberg read every batch once, and a replacement of batch 1
    is refused, naming the rewrite."""
    from onceflow_devkit.services.spark_table_reader import compact_table, read_table

    runtime = iceberg_pipeline(one_kafka_broker, tmp_path, "rest", request)
    properties, identifier = runtime.deployment.catalogs[CONN_ID], runtime.spec.sink(TABLE).target
    topic = runtime.spec.topics[0]
    produce(one_kafka_broker, topic, 300, seed=21)
    first = batch(spark, runtime, "run-1", during=lambda: append_other_rows(runtime, 2))
    between = compact_table(properties, identifier)  # the read after it is Spark's, in the same session
    assert spark_read_rows(between) == written_by_the_pipeline(runtime)
    produce(one_kafka_broker, topic, 300, seed=22)
    compacted = []
    batch(spark, runtime, "run-2", during=lambda: compacted.append(compact_table(properties, identifier)))
    for rewrite in (between.rewrite, compacted[0].rewrite):
        assert rewrite["rewritten_data_files_count"] > 0 and rewrite["failed_data_files_count"] == 0, rewrite
    add_optional_column(runtime, "note")
    produce(one_kafka_broker, topic, 300, seed=23)
    batch(spark, runtime, "run-3")

    expected = written_by_the_pipeline(runtime)
    assert [s for s in batch_snapshots(runtime) if s] == ["0000000001", "0000000002", "0000000003"]
    assert expected and pipeline_rows(table_of(runtime).scan().to_arrow().to_pylist()) == expected

    # A replacement of batch 1, whose files Spark rewrote: refused before the decision, and at commit.
    sink = runtime.coordinator.participants[TABLE]
    table = table_of(runtime)
    again = table.scan(row_filter=f"batch_id == '{first.batch_id}'").to_arrow()
    files = tables.write_data_files(table, runtime.spec.name, TABLE, 99, first.created_at_ms, 1, again.to_batches())
    replacement = sink.vote_for(99, first.created_at_ms, 1, table.location(), files, replaces=first.batch_seq)
    verdict = sink.verify(replacement)
    assert verdict.outcome is Outcome.FAILED and "a rewrite (compaction" in verdict.detail, verdict.detail
    assert sink.commit(replacement).outcome is Outcome.FAILED

    read = read_table(properties, identifier)
    assert spark_read_rows(read) == expected  # Spark too: every batch once, nothing of the refused replacement
    assert sorted(r["views"] for r in read.rows if r["page"] == OTHER_PAGE) == [0, 1]
    assert [(s["operation"], s["summary"].get(BATCH_KEY)) for s in read.snapshots] == [
        ("append", None), ("append", "0000000001"), ("replace", None), ("replace", None), ("append", "0000000002"),
        ("append", "0000000003")]


@pytest.fixture
def proxy(rest_catalog):
    proxy = AnswerDroppingProxy(rest_catalog.uri).start()
    yield proxy
    proxy.stop()


# make test's: one batch and the replay audit, 10 s with the session's Spark warm.
def test_a_batch_commit_whose_answer_was_lost_is_found_by_its_batch_id_when_the_commit_task_runs_again(
        spark, one_kafka_broker, tmp_path, request, proxy):
    from onceflow.ops.audit.replay import replay_audit

    direct = iceberg_pipeline(one_kafka_broker, tmp_path, "rest", request)
    behind_proxy = {CONN_ID: {**direct.deployment.catalogs[CONN_ID], "uri": proxy.uri}}  # the job's and the commit's
    runtime = PipelineRuntime(direct.spec, dataclasses.replace(direct.deployment, catalogs=behind_proxy))
    coordinator = runtime.coordinator
    produce(one_kafka_broker, runtime.spec.topics[0], 300, seed=31)
    with runtime.offset_source() as source:
        plan = coordinator.plan_next(source, runtime.plan_config(), run_id="run-lost")
    run_batch(spark, runtime, plan.batch_seq)
    proxy.drop_answers(1)
    with pytest.raises(RetryLater):  # the commit task fails and Airflow retries it
        coordinator.commit(plan.batch_seq)
    assert len(proxy.dropped) == 1 and batch_snapshots(runtime) == [str(plan.batch_id)]  # the catalog applied it

    assert coordinator.commit(plan.batch_seq).state.value == "committed"  # the retry
    runtime.after_commit(plan)
    assert batch_snapshots(runtime) == [str(plan.batch_id)]  # not appended twice
    expected = written_by_the_pipeline(runtime)
    assert expected and pipeline_rows(table_of(runtime).scan().to_arrow().to_pylist()) == expected
    report = replay_audit(spark, runtime)
    assert report.ok, report.summary()
    assert report.outputs[TABLE].total("found") == len(expected)
