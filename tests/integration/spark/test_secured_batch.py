"""The clickstream example's batches on a secured Apache Kafka, its two principals holding exactly the
ACLs ``onceflow acls`` prints and nothing more: the Spark side reads and pre-commits as
``onceflow-spark``, the Airflow side plans, commits, rolls back, replays, repairs and serves the page as
``onceflow-airflow``, and ``onceflow status`` runs as a user runs it, its settings from the environment.
Real broker (SASL_SSL, SCRAM-SHA-512, StandardAuthorizer denying what no ACL allows), real local Spark."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from onceflow.airflow.deployed import DeployedPipeline
from onceflow.airflow.hooks.kafka import DEFAULT_CONN_ID as KAFKA_CONN_ID
from onceflow.airflow.ui.overview import overview
from onceflow.config.deployment import WAREHOUSE_VAR
from onceflow.config.settings import KAFKA_BOOTSTRAP_VAR, KAFKA_CONFIG_VAR, KAFKA_SECRETS_VAR
from onceflow.core import faults
from onceflow.kafka.acls import AIRFLOW, SPARK, grants
from onceflow.kafka.admin import ensure_topics
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow.sinks.kafka.fencing import fence_transactional_ids
from onceflow.spark.batch_job import run_batch
from onceflow_devkit.audit.clickstream_audit import audit_clickstream
from onceflow_devkit.services.kafka_security import apply_grants
from tests.integration.spark.test_batch_job import produce, unique_clickstream
from tests.support import spark_worker_env

ONCEFLOW = str(Path(sys.executable).parent / "onceflow")
# The pipeline's module, as a user's DAGs folder holds it: where `onceflow status` finds the spec.
PIPELINE_MODULE = '''from onceflow.pipeline.spec import PipelineSpec

PIPELINE = PipelineSpec.from_json({spec!r})
'''


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

    def status_command(self, dags: Path) -> list[dict]:
        """``onceflow status --json`` in a process of its own, as the Airflow side's user runs it: the
        cluster and warehouse from the environment, the spec from a DAGs folder, no secret on its line."""
        dags.mkdir()
        (dags / "pipeline.py").write_text(PIPELINE_MODULE.format(spec=self.airflow.spec.to_json()))
        env = {k: v for k, v in os.environ.items() if k not in (KAFKA_BOOTSTRAP_VAR, KAFKA_CONFIG_VAR, KAFKA_SECRETS_VAR)}
        env.update({**self.airflow.deployment.kafka.environment(), WAREHOUSE_VAR: self.airflow.deployment.warehouse})
        argv = [ONCEFLOW, "status", "--pipeline", self.airflow.spec.name, "--dags-folder", str(dags), "--json"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert self.airflow.deployment.kafka.client_config["sasl.password"] not in done.stdout + done.stderr
        return json.loads(done.stdout)

    def page(self, monkeypatch, tries: int = 3) -> dict:
        """What the onceflow page shows, read as the api-server reads it: the deployment from the Airflow
        side's Kafka connection (``onceflow_kafka``), the pipeline's input lag asked of the broker. The page
        gives Kafka 3 s to answer and asks again on the next load: a loaded machine gets ``tries``."""
        kafka = self.airflow.deployment.kafka
        monkeypatch.setenv(f"AIRFLOW_CONN_{KAFKA_CONN_ID.upper()}",
                           json.dumps({"conn_type": "onceflow_kafka", "extra": kafka.connection_extra()}))
        dag_id = f"{self.airflow.spec.name}_secured"  # the page keeps an input's lag per DAG for a while
        deployed = DeployedPipeline(dag_id, self.airflow.spec, self.airflow.deployment.warehouse, KAFKA_CONN_ID, None)
        runtime = deployed.runtime(identity=f"airflow-ui:{dag_id}")
        assert runtime.deployment.kafka.client_config["sasl.username"] == AIRFLOW.default_user
        for _ in range(tries):
            shown = overview(runtime, dag_id)
            if shown["lag_error"] is None:
                break
            time.sleep(2)
        return shown


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


def test_a_faulted_batch_rolls_back_its_replay_is_repaired_from_the_staged_copy_and_status_and_page_show_them(
        spark, secured_pipeline, tmp_path, monkeypatch, caplog):
    pipeline = secured_pipeline
    topic = pipeline.airflow.spec.topics[0]
    produced = produce(pipeline.admin.deployment.kafka, topic, 300, seed=5)

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

    # The commit task dies right after its COMMIT decision; the broker then aborts the batch's open
    # transactions, as their timeout would: the commit's retry repairs each split from its staged copy.
    try:
        faults.arm("ledger.decision.after_write", "raise")
        with pytest.raises(faults.InjectedFault):
            pipeline.airflow.coordinator.commit(replay.batch_seq)
    finally:
        faults.disarm()
    kafka_sinks = [sink for sink in replay.sinks if sink.kind == "kafka"]
    fence_transactional_ids(pipeline.admin.deployment.kafka.config(), [i for s in kafka_sinks for i in s.transactional_ids])
    with caplog.at_level(logging.INFO, logger="onceflow"):
        assert pipeline.airflow.coordinator.commit(replay.batch_seq).state.value == "committed"
    repaired = {s.name for s in kafka_sinks for r in caplog.records
                if f": {s.name} committed" in r.getMessage() and "repaired from the staged copy" in r.getMessage()}
    assert repaired == {s.name for s in kafka_sinks}, caplog.text
    pipeline.airflow.after_commit(replay)  # the offsets mirror: READ on the group

    waiting = produce(pipeline.admin.deployment.kafka, topic, 40, seed=6)  # not planned yet: the input's lag
    batches = [(2, "committed"), (1, "aborted")]
    status = pipeline.status_command(tmp_path / "dags")
    assert [(row["batch_seq"], row["state"]) for row in status] == batches and status[0]["replay_of"] == 1, status
    page = pipeline.page(monkeypatch)
    assert [(row["batch_seq"], row["state"]) for row in page["batches"]] == batches and not page["open_transactions"]
    assert page["lag_error"] is None and sum(row["lag"] for row in page["lag"]) == waiting, page["lag"]
    assert all(row["oldest_uncommitted_age_s"] is not None for row in page["lag"] if row["lag"]), page["lag"]

    report = audit_clickstream(pipeline.admin)
    assert report.ok, report.summary()
    assert report.input_records == produced == 300 and report.committed_batches == 1
