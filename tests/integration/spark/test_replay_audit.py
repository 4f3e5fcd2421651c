"""``onceflow audit`` by replay on real outputs: files, an Iceberg table and two Kafka
topics of committed batches, compared with the batches computed again from their
plans; then the outputs are tampered with the way real incidents do (a record
produced twice, a Parquet file lost, a file copied in, a committed batch removed on a
run parameter's word by an older onceflow) and the audit must say which output, which
batch and how many rows.
"""

from __future__ import annotations

import shutil
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from onceflow.kafka.offsets import KafkaOffsetSource
from onceflow.ops.audit.replay import replay_audit
from onceflow_devkit.audit.clickstream_audit import audit_clickstream
from onceflow.sinks.files import layout
from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.sinks.kafka.headers import batch_and_split
from onceflow.sinks import sink_kind
from onceflow.spark.batch_job import run_batch
from onceflow.storage.local import local_path
from onceflow_devkit.services.iceberg_catalog import table_of
from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS
from tests.doubles import legacy
from tests.integration.spark.test_batch_job import produce
from tests.integration.spark.test_iceberg_datasource import iceberg_pipeline

OUTPUTS = ("page_minute_counts", "clicks_enriched", "clicks_dead_letter", "page_minute_table")


def runtime_broker_hides(kafka_broker) -> bool:
    return KafkaCluster(kafka_broker.bootstrap, kafka_broker.connection_extra()).broker.hides_aborted


def commit_batches(spark, runtime, n: int) -> list:
    plans = []
    for _ in range(n):
        with runtime.offset_source() as source:
            plan = runtime.coordinator.plan_next(source, runtime.plan_config(), run_id=f"run-{uuid.uuid4().hex[:6]}")
        run_batch(spark, runtime, plan.batch_seq)
        assert runtime.coordinator.commit(plan.batch_seq).state.value == "committed"
        runtime.after_commit(plan)
        plans.append(plan)
    return plans


def one_record_of(broker, topic: str, batch_id: str):
    """A committed record of ``batch_id`` in ``topic``, as a consumer reads it."""
    consumer = Consumer(broker.config(**{"group.id": f"t-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed",
                                         "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error() and (batch_and_split(msg.headers()) or ("",))[0] == batch_id:
                return msg
        raise AssertionError(f"no record of batch {batch_id} in {topic}")
    finally:
        consumer.close()


@pytest.mark.parametrize("broker_name", [
    "apache",
    pytest.param("noida", marks=pytest.mark.slow),
    pytest.param("tansu", marks=pytest.mark.slow),  # 30 s; make test stays under 20 minutes
])
def test_replay_matches_every_output_then_finds_each_tampering(spark, _brokers, broker_name, tmp_path, request):
    kafka_broker = _brokers.get(broker_name)
    shows_aborted = not kafka_broker.has(HIDES_ABORTED_RECORDS)
    # The connection's broker profile tells the audit what the dev kit knows of the broker.
    assert runtime_broker_hides(kafka_broker) is not shows_aborted
    runtime = iceberg_pipeline(kafka_broker, tmp_path, "rest", request)
    produce(kafka_broker, runtime.spec.topics[0], 1000, seed=5)
    first, second = commit_batches(spark, runtime, 2)
    # An attempt that pre-committed everything and was rolled back: its records and files must not count.
    produce(kafka_broker, runtime.spec.topics[0], 200, seed=6)
    with runtime.offset_source() as source:
        aborted = runtime.coordinator.plan_next(source, runtime.plan_config(), run_id="run-aborted")
    run_batch(spark, runtime, aborted.batch_seq)
    assert runtime.coordinator.rollback(aborted.batch_seq, "test: rolled back").state.value == "aborted"

    # The consumer group mirrors the committed ends; the staged Kafka copies of committed batches are gone.
    group = Consumer(kafka_broker.config(**{"group.id": runtime.spec.group_id}))
    ends = group.committed([TopicPartition(runtime.spec.topics[0], p) for p in (0, 1)], timeout=30)
    group.close()
    assert [tp.offset for tp in ends] == [500, 500]
    staging = local_path(runtime.deployment.warehouse) / "_onceflow" / runtime.spec.name / "kafka-staging"
    assert not any(p.is_file() for p in staging.rglob("*")), list(staging.rglob("*"))

    report = replay_audit(spark, runtime)
    assert report.ok, report.summary()
    # The oracle, which does not run the transform, agrees.
    oracle = audit_clickstream(runtime, hides_aborted=not shows_aborted)
    assert oracle.ok and oracle.input_records == first.records + second.records == 1000, oracle.summary()
    assert report.audited == [first.batch_id, second.batch_id] and report.committed_batches == 2
    snapshots = [s.summary["onceflow.batch"] for s in table_of(runtime, "page_minute_table").metadata.snapshots]
    assert snapshots == [first.batch_id, second.batch_id]
    for name in OUTPUTS:
        output = report.outputs[name]
        assert [b.batch for b in output.batches] == [first.batch_id, second.batch_id], report.summary()
        assert all(b.found == b.expected > 0 for b in output.batches), report.summary()
    # Every input record is in exactly one of the two Kafka outputs.
    assert sum(report.outputs[n].total("found") for n in ("clicks_enriched", "clicks_dead_letter")) == first.records + second.records
    # The report names the offsets it read of each topic: a missing record is then inside them or not.
    with KafkaOffsetSource(kafka_broker.config()) as source:
        enriched_ranges = source.topic_ranges(runtime.spec.sink("clicks_enriched").target)
    assert [r.start for r in enriched_ranges] == [0, 0], enriched_ranges
    read = report.outputs["clicks_enriched"].reading
    assert all(f"[{r.partition}] 0..{r.end - 1}" in read for r in enriched_ranges), read
    # Tansu shows the rolled-back batch's records: without the votes they could not be told apart.
    aside = report.outputs["clicks_enriched"].set_aside
    assert (aside > 0) == shows_aborted, report.summary()

    # A committed record produced again, with its headers: what an at-least-once retry does.
    record = one_record_of(kafka_broker, runtime.spec.sink("clicks_enriched").target, second.batch_id)
    producer = Producer(kafka_broker.config())
    producer.produce(record.topic(), record.value(), record.key(), partition=record.partition(), headers=record.headers())
    assert producer.flush(30) == 0
    # A Parquet file of batch 1 lost; a file of batch 2 copied in beside the original.
    files_root = sink_kind("files").location(runtime.spec.sink("page_minute_counts"), runtime.deployment.warehouse)
    batch_1 = local_path(layout.batch_dir(files_root, first.batch_seq))
    batch_2 = local_path(layout.batch_dir(files_root, second.batch_seq))
    lost = sorted(batch_1.glob("part-*.parquet"))[0]
    lost.unlink()
    copied = sorted(batch_2.glob("part-*.parquet"))[0]
    shutil.copy(copied, batch_2 / "part-00099-copy.parquet")

    report = replay_audit(spark, runtime)
    assert not report.ok
    enriched = {b.batch: b for b in report.outputs["clicks_enriched"].batches}
    if shows_aborted:  # the copy lies outside every committed vote's offsets: set aside, not compared
        assert report.outputs["clicks_enriched"].ok and report.outputs["clicks_enriched"].set_aside == aside + 1
    else:
        assert (enriched[second.batch_id].duplicates, enriched[first.batch_id].ok) == (1, True), report.summary()
    counts = {b.batch: b for b in report.outputs["page_minute_counts"].batches}
    assert counts[first.batch_id].missing > 0 and counts[first.batch_id].duplicates == counts[first.batch_id].unexpected == 0
    assert counts[second.batch_id].duplicates > 0 and counts[second.batch_id].missing == 0
    findings = "\n".join(report.outputs["page_minute_counts"].findings)
    assert f"{lost.name}: listed in the batch's manifest and gone" in findings
    assert "part-00099-copy.parquet: in the batch's directory and not in its manifest" in findings
    assert report.outputs["clicks_dead_letter"].ok and report.outputs["page_minute_table"].ok, report.summary()
    # (--batches: the shop_orders e2e test audits one batch of a tampered output through the CLI.)

    # What an older onceflow did with the run conf {"replaces": 1} of an offsets pipeline: the plan of
    # batch 2 carried it, and the commit removed batch 1 from the file output. The audit does not take
    # the plan's word for a replacement: batch 1's rows are missing, and it says so.
    legacy.write_plan(runtime.coordinator.ledger, second, {"replaces": first.batch_seq, "run_id": second.run_id,
                                                          "reprocessed": {"page_minute_counts": "replaced"}},
                      overwrite=True)
    runtime.storage.delete(layout.manifest_path(files_root, first.batch_seq))
    shutil.rmtree(batch_1)
    report = replay_audit(spark, runtime)
    assert not report.ok
    counts = {b.batch: b for b in report.outputs["page_minute_counts"].batches}
    assert counts[first.batch_id].missing == counts[first.batch_id].expected > 0, report.summary()
    assert f"batch {first.batch_id}: 0 found" in report.summary()
    assert report.replacements_refused and f"batch {second.batch_id}'s plan (old format) carries 'replaces'" in \
        report.replacements_refused[0], report.summary()
    oracle = audit_clickstream(runtime, hides_aborted=not shows_aborted)
    assert not oracle.ok, oracle.summary()
