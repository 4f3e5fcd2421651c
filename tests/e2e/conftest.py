"""End-to-end fixtures: the clickstream DAG in a real Airflow against a fresh
broker per test (the DAG's topic names are fixed, so tests must not share one)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from onceflow.airflow_env import onceflow_airflow
from onceflow.kafka.admin import ensure_topics
from onceflow.pipelines.clickstream import CLICKSTREAM
from onceflow.pipelines.clickstream_data import generate
from onceflow.runtime import Deployment, PipelineRuntime
from onceflow.services.kafka_broker import start_broker
from onceflow.services.process import ManagedProcess
from tests.conftest import TEST_HOME


class ClickstreamWorld:
    """A broker, a warehouse and an Airflow home for one test."""

    def __init__(self, broker, warehouse: str, airflow, s3=None):
        self.broker = broker
        self.warehouse = warehouse
        self.airflow = airflow
        self.runtime = PipelineRuntime(CLICKSTREAM, Deployment(warehouse, broker, s3))

    def produce(self, n: int, seed: int = 0, malformed_ratio: float = 0.1) -> int:
        producer = Producer(self.broker.config())
        records = generate(n, seed=seed, malformed_ratio=malformed_ratio)
        for i, r in enumerate(records):
            producer.produce("clicks", key=r.key, value=r.value, partition=i % 2)
        producer.flush(30)
        return len(records)

    def audit(self):
        from onceflow.audit.clickstream_audit import audit_clickstream

        return audit_clickstream(self.runtime)


@pytest.fixture
def fresh_broker():
    proc = ManagedProcess(f"e2e-kafka-{uuid.uuid4().hex[:6]}", TEST_HOME / f"e2e-{uuid.uuid4().hex[:6]}").reset()
    broker = start_broker("noida", proc, die_with_parent=True)
    ensure_topics(broker.config(), ["clicks", *(s.target for s in CLICKSTREAM.sinks if s.kind == "kafka")])
    yield broker
    proc.stop(grace=2)


@pytest.fixture
def world(fresh_broker, tmp_path) -> ClickstreamWorld:
    warehouse = f"file://{tmp_path}/warehouse"
    airflow = onceflow_airflow(tmp_path / "airflow", fresh_broker, warehouse)
    airflow.migrate()
    return ClickstreamWorld(fresh_broker, warehouse, airflow)
