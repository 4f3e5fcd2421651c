"""Iceberg outputs through real Spark: a pipeline writes ``page_minute_counts`` both
as a Parquet directory and as an Iceberg table: through the dev kit's REST catalog (a local
warehouse), or the SQL catalog on a local and an S3 warehouse.

Plan -> Spark job (the onceflow_iceberg data source writes the data files on
executors) -> commit; the table, read through its catalog, holds the same rows
as the Parquet output, one snapshot per batch.
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from onceflow.sinks.iceberg import tables
from onceflow.sinks.files import read_committed
from onceflow.kafka.admin import ensure_topics
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow.config.settings import ConfigurationError
from onceflow.spark.batch_job import run_batch
from onceflow.pipeline.spec import SinkSpec
from onceflow_devkit.services.iceberg_catalog import CONN_ID, catalog_properties
from onceflow_examples.clickstream import transform as clickstream_transform
from onceflow.storage import warehouse_storage
from tests.integration.spark.test_batch_job import produce, unique_clickstream

COLUMNS = ["page", "window_start", "views", "amount_sum", "batch_id"]


def transform(records, batch_id):
    """The example's outputs, ``page_minute_counts`` also as ``page_minute_table``."""
    outputs = clickstream_transform(records, batch_id)
    return {**outputs, "page_minute_table": outputs["page_minute_counts"]}


def iceberg_pipeline(broker, tmp_path, warehouse_kind: str, request):
    """``warehouse_kind``: "rest" (the session's REST catalog, a local warehouse), or the SQL
    catalog on a "local" or "s3" warehouse."""
    tag = uuid.uuid4().hex[:8]
    base = unique_clickstream(tag)
    table = SinkSpec("page_minute_table", "iceberg", f"cs_{tag}.page_minute_counts", catalog=CONN_ID,
                     partition_by=("day(window_start)",))
    spec = dataclasses.replace(base, transform=f"{__name__}:transform", sinks=(*base.sinks, table))
    ensure_topics(broker.config(), [spec.topics[0], *(s.target for s in spec.sinks if s.kind == "kafka")])
    if warehouse_kind == "rest":
        warehouse = f"file://{tmp_path}/warehouse"
        return PipelineRuntime(spec, Deployment(warehouse, broker, None,
                                                {CONN_ID: request.getfixturevalue("rest_catalog").properties()}))
    if warehouse_kind == "local":
        warehouse, s3 = f"file://{tmp_path}/warehouse", None
        lake = f"file://{tmp_path}/lake"
    else:
        s3 = request.getfixturevalue("s3_endpoint")
        bucket = request.getfixturevalue("s3_bucket")
        warehouse, lake = f"s3://{bucket}/warehouse", f"s3://{bucket}/lake"
    catalogs = {CONN_ID: catalog_properties(tmp_path / "catalog", lake, s3)}
    return PipelineRuntime(spec, Deployment(warehouse, broker, s3, catalogs))


@pytest.mark.parametrize("warehouse_kind", [
    # Through the REST catalog, make test's replay audit (test_replay_audit) checks the table batch by batch.
    pytest.param("rest", marks=pytest.mark.slow),
    pytest.param("local", marks=pytest.mark.slow),
    "s3",
])
def test_batches_commit_to_the_table_as_one_snapshot_each(spark, one_kafka_broker, tmp_path, request, warehouse_kind):
    runtime = iceberg_pipeline(one_kafka_broker, tmp_path, warehouse_kind, request)
    produce(one_kafka_broker, runtime.spec.topics[0], 1000, seed=3)
    coordinator = runtime.coordinator
    for _ in range(2):
        with runtime.offset_source() as source:
            plan = coordinator.plan_next(source, runtime.plan_config(), run_id=f"run-{uuid.uuid4().hex[:6]}")
        run_batch(spark, runtime, plan.batch_seq)
        assert coordinator.commit(plan.batch_seq).state.value == "committed"
        runtime.after_commit(plan)

    sink = runtime.spec.sink("page_minute_table")
    table = tables.open_catalog(CONN_ID, runtime.deployment.catalogs[CONN_ID]).load_table(sink.target)
    snapshots = [s.summary for s in table.metadata.snapshots]
    assert [s["onceflow.batch"] for s in snapshots] == ["0000000001", "0000000002"]
    assert [p.name for p in table.spec().fields] == ["window_start_day"]

    def rows(arrow):
        return sorted(tuple(r[c] for c in COLUMNS) for r in arrow.select(COLUMNS).to_pylist())

    from onceflow.sinks import sink_kind

    files_uri = sink_kind("files").location(runtime.spec.sink("page_minute_counts"), runtime.deployment.warehouse)
    parquet = read_committed(files_uri, warehouse_storage(runtime.deployment))
    scanned = table.scan().to_arrow()
    assert scanned.num_rows > 0 and rows(scanned) == rows(parquet)
    assert sum(int(s["added-records"]) for s in snapshots) == parquet.num_rows

    # The replay audit reads every output back from the warehouse (and the lake) on executors.
    from onceflow.ops.audit.replay import replay_audit

    report = replay_audit(spark, runtime)
    assert report.ok, report.summary()
    assert report.outputs["page_minute_table"].total("found") == parquet.num_rows


def test_a_job_that_dies_after_writing_the_table_is_rolled_back_and_its_replay_commits_once(spark, one_kafka_broker,
                                                                                          tmp_path, request):
    """The job writes and votes every output, then dies: the rollback deletes the
    table's files of that attempt and no snapshot ever names the batch; the replay
    of the same ranges commits it once."""
    from onceflow.core import faults

    runtime = iceberg_pipeline(one_kafka_broker, tmp_path, "rest", request)
    produce(one_kafka_broker, runtime.spec.topics[0], 400, seed=5)
    coordinator = runtime.coordinator
    with runtime.offset_source() as source:
        plan = coordinator.plan_next(source, runtime.plan_config(), run_id="run-dies")
    faults.arm("job.after_votes", "raise")
    try:
        with pytest.raises(faults.InjectedFault):
            run_batch(spark, runtime, plan.batch_seq)
    finally:
        faults.disarm()
    sink = runtime.spec.sink("page_minute_table")
    table = tables.open_catalog(CONN_ID, runtime.deployment.catalogs[CONN_ID]).load_table(sink.target)
    batch_files = tables.batch_dir(table.location(), runtime.spec.name, sink.name, plan.batch_seq, plan.created_at_ms)
    from onceflow.sinks.iceberg.participant import _list_files

    assert _list_files(table.io, batch_files), "the job wrote the table's data files before dying"
    assert coordinator.rollback(plan.batch_seq, "the job died").state.value == "aborted"
    assert _list_files(table.io, batch_files) == []
    table = table.refresh()
    assert table.metadata.snapshots == [] and table.scan().to_arrow().num_rows == 0

    with runtime.offset_source() as source:
        replay = coordinator.plan_next(source, runtime.plan_config(), run_id="run-replay")
    assert replay.replay_of == plan.batch_seq and replay.ranges == plan.ranges
    run_batch(spark, runtime, replay.batch_seq)
    assert coordinator.commit(replay.batch_seq).state.value == "committed"
    table = table.refresh()
    assert [s.summary["onceflow.batch"] for s in table.metadata.snapshots] == [str(replay.batch_id)]


def test_a_frame_that_does_not_fit_the_table_fails_before_writing(spark, tmp_path):
    catalog = tables.open_catalog(CONN_ID, catalog_properties(tmp_path / "catalog", f"file://{tmp_path}/lake"))
    first = spark.createDataFrame([("a", 1)], "page string, views long")
    from pyspark.sql.pandas.types import to_arrow_schema

    tables.prepared_table(catalog, "ns.t", to_arrow_schema(first.schema, timezone="UTC"), (), "sink 't'")
    other = spark.createDataFrame([("a", "x")], "page string, views string")
    with pytest.raises(ConfigurationError, match="sink 't': the output's columns do not fit table 'ns.t'"):
        tables.prepared_table(catalog, "ns.t", to_arrow_schema(other.schema, timezone="UTC"), (), "sink 't'")
    with pytest.raises(ConfigurationError, match="partition_by names \\['nope'\\]"):
        tables.prepared_table(catalog, "ns.u", to_arrow_schema(first.schema, timezone="UTC"), ("day(nope)",), "sink 'u'")
