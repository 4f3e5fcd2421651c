"""The clickstream example's batches on a secured Apache Kafka, its two principals holding exactly the
ACLs ``onceflow acls`` prints and nothing more: the Spark side reads and pre-commits as
``onceflow-spark``, the Airflow side plans, commits, rolls back and replays as ``onceflow-airflow``.
Real broker (SASL_SSL, SCRAM-SHA-512, StandardAuthorizer denying what no ACL allows), real local Spark."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import pytest

from onceflow.core import faults
from onceflow.kafka.acls import AIRFLOW, SPARK, grants
from onceflow.kafka.admin import ensure_topics
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow.spark.batch_job import run_batch
from onceflow_devkit.audit.clickstream_audit import audit_clickstream
from onceflow_devkit.services.kafka_security import apply_grants
from tests.integration.spark.test_batch_job import produce, unique_clickstream
from tests.support import spark_worker_env


@dataclass
class SecuredPipeline:
    """One pipeline on the secured broker: the same spec and warehouse, seen by each principal."""

    airflow: PipelineRuntime
    spark_side: PipelineRuntime
    admin: PipelineRuntime
    spark_secrets: dict[str, str]

    def plan(self, run_id: str):
        self.airflow.check_kafka()
        self.airflow.check_outputs()
        with self.airflow.offset_source() as source:
            return self.airflow.coordinator.plan_next(source, self.airflow.plan_config(), run_id=run_id)

    def run_job(self, spark, seq: int):
        # The Spark side's executors get their Kafka password as a deployment gives it: their environment.
        with spark_worker_env(spark, ONCEFLOW_KAFKA_SECRETS=json.dumps(self.spark_secrets)):
            return run_batch(spark, self.spark_side, seq)


@pytest.fixture
def secured_pipeline(secured_kafka, tmp_path) -> SecuredPipeline:
    spec = unique_clickstream(uuid.uuid4().hex[:8])
    warehouse = f"file://{tmp_path}/warehouse"
    admin = secured_kafka.broker
    ensure_topics(admin.config(), [spec.topics[0], *(s.target for s in spec.sinks if s.kind == "kafka")])
    spark_user = secured_kafka.as_user(SPARK.default_user)
    pipeline = SecuredPipeline(
        PipelineRuntime(spec, Deployment(warehouse, secured_kafka.as_user(AIRFLOW.default_user)), identity="airflow"),
        PipelineRuntime(spec, Deployment(warehouse, spark_user), identity="spark-driver"),
        PipelineRuntime(spec, Deployment(warehouse, admin), identity="audit"),
        {"sasl.password": spark_user.client_config["sasl.password"]},
    )
    granted = grants(spec.kafka_resources(), required_only=True)
    apply_grants(admin.config(), granted)
    yield pipeline
    apply_grants(admin.config(), granted, revoke=True)


def test_a_faulted_batch_rolls_back_and_its_replay_commits_with_exactly_the_printed_acls(spark, secured_pipeline):
    pipeline = secured_pipeline
    produced = produce(pipeline.admin.deployment.kafka, pipeline.airflow.spec.topics[0], 300, seed=5)

    first = pipeline.plan("run-1")
    try:
        faults.arm("job.after_votes", "raise")  # the job dies after voting: its transactions stay open
        with pytest.raises(faults.InjectedFault):
            pipeline.run_job(spark, first.batch_seq)
    finally:
        faults.disarm()
    rolled_back = pipeline.airflow.coordinator.rollback(first.batch_seq, reason="the spark task failed")
    assert rolled_back.state.value == "aborted"  # EndTxn(abort) and fencing, as onceflow-airflow

    replay = pipeline.plan("run-2")
    assert replay.replay_of == first.batch_seq and replay.ranges == first.ranges
    assert pipeline.run_job(spark, replay.batch_seq).input_records == replay.records == 300
    assert pipeline.airflow.coordinator.commit(replay.batch_seq).state.value == "committed"
    pipeline.airflow.after_commit(replay)  # the offsets mirror: READ on the group

    report = audit_clickstream(pipeline.admin)
    assert report.ok, report.summary()
    assert report.input_records == produced == 300 and report.committed_batches == 1
