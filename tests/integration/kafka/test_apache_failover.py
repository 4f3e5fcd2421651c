"""Brokers die in the middle of a commit, in a 3-broker Apache Kafka cluster (replication
factor 3, min.insync.replicas 2). The broker that coordinates a split's transaction: the
commit that recovery runs next finishes on the coordinator that took over. The only broker
that holds an output partition: the commit is not done while the coordinator cannot write
that partition's commit marker, however EndTxn answered. Every record is read exactly once.
Neither compatible broker runs as a cluster."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from kafka import KafkaAdminClient
from kafka.admin import AbortTransactionSpec
from kafka.net.compat import KafkaNetClient
from kafka.structs import TopicPartition as KafkaTopicPartition
from kafka.protocol.metadata import FindCoordinatorRequest

from onceflow import faults
from onceflow.kafka.config import kafka_python_config
from onceflow.kafka.ids import transactional_id
from onceflow.kafka.sink import AFTER_END_TXN, KafkaSinkParticipant, handles_of
from onceflow.protocol.participant import Outcome
from onceflow_devkit.services.apache_kafka import start_apache_cluster
from tests.conftest import TEST_HOME
from tests.integration.kafka.helpers import batch_value, create_topic, precommit_batch, read_committed

from confluent_kafka.admin import AdminClient

@pytest.fixture(scope="module")
def cluster():
    running = start_apache_cluster(TEST_HOME / f"cluster-{uuid.uuid4().hex[:6]}", die_with_parent=True)
    yield running
    running.stop(kill=True)


def coordinator_of(config, transactional_id: str) -> int:
    client = KafkaNetClient(**kafka_python_config(config))
    deadline = time.monotonic() + 60
    try:
        client.get_broker_version(10_000)
        while True:  # COORDINATOR_NOT_AVAILABLE until the transaction state topic exists
            found = client.send_and_receive(client.least_loaded_node(), FindCoordinatorRequest(
                key=transactional_id, key_type=1, coordinator_keys=[transactional_id]), timeout_ms=10_000)
            entry = found.coordinators[0] if found.coordinators else found
            if entry.error_code == 0:
                return entry.node_id
            assert entry.error_code == 15 and time.monotonic() < deadline, entry
            time.sleep(0.2)
    finally:
        client.close()


def await_fenced(config, node: int, timeout_s: float = 30) -> None:
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout_s
    while node in admin.list_topics(timeout=10).brokers:
        assert time.monotonic() < deadline, f"node {node} still in the metadata {timeout_s} s after it died"
        time.sleep(0.2)


def test_the_commit_finishes_on_the_new_coordinator_when_the_old_one_dies_mid_commit(cluster, tmp_path):
    config = {"bootstrap.servers": cluster.bootstrap}
    topic = create_topic(config, partitions=3, prefix="failover", replication=3)
    pipeline = f"p-{uuid.uuid4().hex[:6]}"
    vote = precommit_batch(config, topic, tmp_path, pipeline, (100, 100))
    first = handles_of(vote)[0]
    participant = KafkaSinkParticipant("out", pipeline, config, staging_root=str(tmp_path))
    coordinator = coordinator_of(config, first.transactional_id)

    faults.arm(AFTER_END_TXN, "raise")  # the commit task dies once every EndTxn is sent ...
    try:
        with pytest.raises(faults.InjectedFault):
            participant.commit(vote)
    finally:
        faults.disarm()
    cluster.kill(coordinator - 1)  # ... and so does the broker that coordinated split 0
    try:
        result = participant.commit(vote)  # recovery's commit

        assert result.ok, result.detail
        assert coordinator_of(config, first.transactional_id) != coordinator  # another broker took over
        expected = Counter(batch_value(1, s, i) for s in range(2) for i in range(100))
        assert Counter(v for _, v, _ in read_committed(config, topic, 3, timeout_s=60)) == expected
        assert participant.commit(vote).outcome is Outcome.ALREADY_DONE
    finally:
        cluster.start(coordinator - 1)
    assert Counter(v for _, v, _ in read_committed(config, topic, 3, timeout_s=60)) == expected


def test_a_commit_is_not_done_while_its_records_are_invisible_even_when_the_coordinator_says_complete(cluster, tmp_path):
    # The one broker holding the output partition is down when the commit ends the transaction: Apache
    # Kafka's coordinator reports CompleteCommit at once, the marker is never written, and the
    # transaction hangs there after the broker returns. Taking the coordinator's word would send the
    # Asset event for records no reader will ever see.
    config = {"bootstrap.servers": cluster.bootstrap}
    topic = create_topic(config, partitions=1, prefix="unreplicated", topic_config={"min.insync.replicas": "1"})
    holder = AdminClient(config).list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    pipeline = next(p for p in (f"p-{uuid.uuid4().hex[:6]}" for _ in range(50))  # coordinated elsewhere
                    if coordinator_of(config, transactional_id(p, "out", 0, 1)) != holder)
    vote = precommit_batch(config, topic, tmp_path, pipeline, (50,))
    participant = KafkaSinkParticipant("out", pipeline, config, staging_root=str(tmp_path), timeout_s=3)
    split = handles_of(vote)[0]

    cluster.kill(holder - 1)
    try:
        await_fenced(config, holder)  # out of every ISR, so EndTxn's PrepareCommit is written at once
        while_down = participant.commit(vote)
    finally:
        cluster.start(holder - 1)
    hanging = participant.commit(vote)

    assert while_down.outcome is Outcome.RETRY_LATER, while_down.detail
    assert hanging.outcome is Outcome.RETRY_LATER, hanging.detail
    assert "commit marker was never written" in hanging.detail and "kafka-transactions.sh" in hanging.detail
    assert read_committed(config, topic, 1, timeout_s=5) == []  # the hanging transaction holds everything back

    # What the message says to do: abort it as kafka-transactions.sh does, then commit again.
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.abort_transaction(AbortTransactionSpec(KafkaTopicPartition(topic, 0), split.producer_id, split.epoch))
    finally:
        admin.close()
    repaired = participant.commit(vote)

    assert repaired.outcome is Outcome.DONE and "repaired" in repaired.detail, repaired.detail
    assert Counter(v for _, v, _ in read_committed(config, topic, 1, timeout_s=60)) == Counter(
        batch_value(1, 0, i) for i in range(50))
    assert participant.commit(vote).outcome is Outcome.ALREADY_DONE
