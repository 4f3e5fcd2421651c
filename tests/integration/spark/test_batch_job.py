"""One batch end to end below Airflow: plan -> Spark job -> commit, audited.

Real broker, real local Spark with the onceflow data sources, the ledger on
the warehouse. The audit reads the real outputs.
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from onceflow_devkit.audit.clickstream_audit import audit_clickstream
from onceflow.kafka.admin import ensure_topics
from onceflow_examples.clickstream import CLICKSTREAM
from onceflow_examples.clickstream_data import generate, produce as produce_clicks
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS
from onceflow.spark.batch_job import run_batch
from onceflow.pipeline.spec import SinkSpec
from onceflow.storage.local import local_path
from tests.integration.kafka.helpers import open_transaction
from tests.support import require


def unique_clickstream(tag: str):
    return dataclasses.replace(
        CLICKSTREAM,
        name=f"cs-{tag}",
        topics=(f"clicks-{tag}",),
        sinks=(
            SinkSpec("page_minute_counts", "files", f"cs-{tag}/page_minute_counts"),
            SinkSpec("clicks_enriched", "kafka", f"clicks_enriched-{tag}"),
            SinkSpec("clicks_dead_letter", "kafka", f"clicks_dead_letter-{tag}"),
        ),
        max_records_per_partition=400,
    )


def produce(broker, topic: str, n: int, seed: int) -> int:
    return produce_clicks(broker.config(), topic, generate(n, seed=seed, malformed_ratio=0.1))


def clickstream_runtime(broker, tmp_path) -> PipelineRuntime:
    """A pipeline of its own (topics, warehouse) on ``broker``."""
    require(broker, HIDES_ABORTED_RECORDS)
    spec = unique_clickstream(uuid.uuid4().hex[:8])
    ensure_topics(broker.config(), [spec.topics[0], *(s.target for s in spec.sinks if s.kind == "kafka")])
    return PipelineRuntime(spec, Deployment(f"file://{tmp_path}/warehouse", broker))


@pytest.fixture
def pipeline(kafka_broker, tmp_path):
    return clickstream_runtime(kafka_broker, tmp_path)


@pytest.mark.slow  # make test's replay audit test (test_replay_audit) commits, mirrors and audits two batches on noida
def test_two_batches_commit_exactly_once(spark, pipeline, kafka_broker):
    produced = produce(kafka_broker, pipeline.spec.topics[0], 1000, seed=1)
    coordinator = pipeline.coordinator
    sizes = []
    for _ in range(2):
        with pipeline.offset_source() as source:
            plan = coordinator.plan_next(source, pipeline.plan_config(), run_id=f"run-{uuid.uuid4().hex[:6]}")
        result = run_batch(spark, pipeline, plan.batch_seq)
        assert result.input_records == plan.records
        status = coordinator.commit(plan.batch_seq)
        staged = local_path(pipeline.deployment.warehouse) / "_onceflow" / pipeline.spec.name / "kafka-staging"
        assert any(p.is_file() for p in staged.rglob("*")), "pre-commit keeps a copy of the Kafka output for repair"
        pipeline.after_commit(plan)
        assert status.state.value == "committed"
        sizes.append(plan.records)
    # 500 records per partition, at most 400 per partition and batch.
    assert sizes == [800, 200]

    # The consumer group mirrors the committed ends; staged Kafka copies are gone.
    from confluent_kafka import Consumer, TopicPartition

    group = Consumer(kafka_broker.config(**{"group.id": pipeline.spec.group_id}))
    committed = group.committed([TopicPartition(pipeline.spec.topics[0], p) for p in (0, 1)], timeout=30)
    group.close()
    assert [tp.offset for tp in committed] == [500, 500]
    staging = local_path(pipeline.deployment.warehouse) / "_onceflow" / pipeline.spec.name / "kafka-staging"
    assert not any(p.is_file() for p in staging.rglob("*")), list(staging.rglob("*"))

    report = audit_clickstream(pipeline)
    assert report.ok, report.summary()
    assert report.input_records == produced == 1000 and report.committed_batches == 2
    assert report.valid + report.malformed == 1000 and report.malformed > 0
    assert report.outputs["clicks_enriched"].records == report.valid
    assert report.outputs["clicks_dead_letter"].records == report.malformed


def test_records_too_large_for_their_topic_are_withheld_and_the_batch_commits(spark, one_kafka_broker, tmp_path):
    # A valid event whose enriched record is over the producer's 1,000,000-byte limit, and a malformed
    # one whose dead letter (the payload as text and base64) is: Kafka would refuse both on every
    # replay. The batch commits; they are published in the withheld files, and the audit finds
    # every input record exactly once in enriched + withheld and dead letters + withheld.
    from onceflow_examples.clickstream_data import OVERSIZED_PRODUCER, ClickRecord, oversized
    from onceflow.core.batch_view import batch_row

    pipeline = clickstream_runtime(one_kafka_broker, tmp_path)
    records = generate(200, seed=9, malformed_ratio=0.1)
    big_valid = oversized(next(r for r in records if r.reason is None))
    big_malformed = ClickRecord(b"big-malformed", b"{" + b"m" * 500_000, "not JSON")
    config = one_kafka_broker.config(**OVERSIZED_PRODUCER)
    produced = produce_clicks(config, pipeline.spec.topics[0], [big_valid, *records, big_malformed])
    with pipeline.offset_source() as source:
        plan = pipeline.coordinator.plan_next(source, pipeline.plan_config(), run_id="run-big")
    run_batch(spark, pipeline, plan.batch_seq)
    status = pipeline.coordinator.commit(plan.batch_seq)
    assert status.state.value == "committed"
    assert batch_row(status)["withheld"] == {"clicks_enriched": 1, "clicks_dead_letter": 1}
    pipeline.after_commit(plan)

    report = audit_clickstream(pipeline)
    assert report.ok, report.summary()
    assert report.input_records == produced == 202
    assert (report.outputs["clicks_enriched"].withheld, report.outputs["clicks_dead_letter"].withheld) == (1, 1)
    assert report.outputs["clicks_enriched"].records == report.valid
    assert report.outputs["clicks_dead_letter"].records == report.malformed


def test_a_retried_attempt_ends_the_earlier_attempts_transactions_before_its_writers_start(spark, one_kafka_broker, tmp_path,
                                                                                          monkeypatch):
    # Attempt 1 votes and dies, leaving its Kafka transactions open. Attempt 2 ends them itself, one id
    # at a time, before any of its writers starts (all writers' init_transactions aborting them at the
    # same moment once left a Tansu partition stuck for ever, docs/brokers.md). Attempt 3 commits.
    # And every kind's pre_commit gets the job_options onceflow.sinks.api.JOB_OPTIONS documents.
    from onceflow.core import faults
    from onceflow.sinks import sink_kind
    from onceflow.sinks.api import JOB_OPTIONS, OPTIONAL_JOB_OPTIONS

    passed = []

    def recording(pre_commit):
        def pre_commit_recorded(self, frame, sink, sink_plan, deployment, job_options):
            passed.append((sink.name, job_options))
            return pre_commit(self, frame, sink, sink_plan, deployment, job_options)
        return pre_commit_recorded

    for kind in map(type, map(sink_kind, ("files", "kafka"))):
        monkeypatch.setattr(kind, "pre_commit", recording(kind.pre_commit))
    pipeline = clickstream_runtime(one_kafka_broker, tmp_path)
    produced = produce(one_kafka_broker, pipeline.spec.topics[0], 300, seed=11)
    enriched = pipeline.spec.sink("clicks_enriched").target
    with pipeline.offset_source() as source:
        plan = pipeline.coordinator.plan_next(source, pipeline.plan_config(), run_id="run-retried")
    try:
        faults.arm("job.after_votes", "raise")
        with pytest.raises(faults.InjectedFault):
            run_batch(spark, pipeline, plan.batch_seq)
        assert open_transaction(one_kafka_broker, enriched), "attempt 1's transactions are open"
        faults.arm("kafka.precommit.after_fencing", "raise")  # attempt 2 stops right after its fencing
        with pytest.raises(faults.InjectedFault):
            run_batch(spark, pipeline, plan.batch_seq)
        assert not open_transaction(one_kafka_broker, enriched), "attempt 2 ended them before writing"
    finally:
        faults.disarm()
    result = run_batch(spark, pipeline, plan.batch_seq)
    assert result.attempt == 3 and pipeline.coordinator.commit(plan.batch_seq).state.value == "committed"
    required = set(JOB_OPTIONS) - set(OPTIONAL_JOB_OPTIONS)
    assert passed and all(set(options) == required and options["sink"] == sink for sink, options in passed), passed
    report = audit_clickstream(pipeline)
    assert report.ok and report.input_records == produced, report.summary()
