"""Apache Kafka run from its jars (onceflow_devkit.services.apache_kafka): transactions,
read_committed, a SIGKILL restart that keeps data and an open transaction, 3.9, a 3-node cluster."""

from __future__ import annotations

import os
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from onceflow.kafka.admin import ensure_topics
from onceflow_devkit.services.apache_kafka import start_apache_cluster
from onceflow_devkit.services.kafka_broker import KafkaBroker
from onceflow_devkit.smoke import kafka_round_trip
from tests.integration.kafka.helpers import read_committed
from tests.support import ROOT


def _read(broker: KafkaBroker, topic: str, partitions: int, isolation: str, timeout: float = 20) -> list[bytes]:
    """Values up to the end of every partition (the last stable offset, read_committed)."""
    return [value for _, value, _ in read_committed(broker.config(), topic, partitions, timeout, isolation)]


def _producer(broker: KafkaBroker, topic: str) -> Producer:
    producer = Producer(broker.config(**{"transactional.id": f"apache-test-{topic}", "transaction.timeout.ms": 120000}))
    producer.init_transactions(60)
    return producer


def _send(producer: Producer, topic: str, values: list[bytes], partitions: int = 1) -> None:
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % partitions)
    producer.flush(30)


def test_transactional_produce_is_read_back_committed_and_aborted_records_hidden(_brokers):
    broker = _brokers.get("apache")
    trip = kafka_round_trip(broker, records=20)
    assert sorted(trip.read_committed_values) == sorted(trip.committed_values)


def test_a_sigkilled_node_keeps_committed_records_and_the_open_transaction(_brokers):
    broker = _brokers.get("apache")
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.config(), [topic], 1, 30)
    producer = _producer(broker, topic)
    committed = [f"committed-{i}".encode() for i in range(5)]
    _send(producer, topic, committed)
    producer.commit_transaction(30)
    pending = [f"open-{i}".encode() for i in range(5)]
    _send(producer, topic, pending)  # left open across the restart

    assert _brokers.restart("apache", kill=True).bootstrap == broker.bootstrap
    # The records are there, the transaction still open: read_committed stops at its first record.
    assert sorted(_read(broker, topic, 1, "read_uncommitted")) == sorted(committed + pending)
    assert sorted(_read(broker, topic, 1, "read_committed")) == sorted(committed)
    # The coordinator still knows it: the same producer commits it after the restart.
    producer.commit_transaction(60)
    assert sorted(_read(broker, topic, 1, "read_committed")) == sorted(committed + pending)


@pytest.mark.slow
def test_kafka_3_9_reads_back_committed_records_and_hides_aborted_ones(_brokers):
    trip = kafka_round_trip(_brokers.get("apache-3.9"), records=20)
    assert sorted(trip.read_committed_values) == sorted(trip.committed_values)


@pytest.fixture
def apache_cluster():
    cluster = start_apache_cluster(ROOT / ".onceflow" / "test" / f"session-{os.getpid()}" / "apache-cluster",
                                   die_with_parent=True)
    yield cluster
    cluster.stop(kill=True)


@pytest.mark.slow
def test_a_three_node_cluster_commits_a_transaction_with_one_node_killed(apache_cluster):
    broker = KafkaBroker(apache_cluster.bootstrap, name="apache")
    topic = f"cluster-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(broker.config())
    (created,) = admin.create_topics([NewTopic(topic, 3, 3)], operation_timeout=30).values()
    created.result(30)  # replicated on every node, so one may die
    producer = _producer(broker, topic)  # the transaction coordinator's topic exists before the kill
    _send(producer, topic, [b"before"])
    producer.commit_transaction(30)

    apache_cluster.kill(0)
    values = [f"v-{i}".encode() for i in range(30)]
    _send(producer, topic, values, partitions=3)
    producer.commit_transaction(60)
    assert sorted(_read(broker, topic, 3, "read_committed", timeout=60)) == sorted(values + [b"before"])

    apache_cluster.start(0)  # rejoins with its data
    assert apache_cluster.procs[0].running_pid() is not None
