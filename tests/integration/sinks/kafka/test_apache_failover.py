"""Brokers die in the middle of a commit, in a 3-broker Apache Kafka cluster (replication
factor 3, min.insync.replicas 2). The broker that coordinates a split's transaction: the
commit that recovery runs next finishes on the coordinator that took over. The only broker
that holds an output partition: the coordinator reports the commit complete but never writes
that partition's marker; the commit does not take its word, and writes the marker itself. Every record is read exactly once.
Neither compatible broker runs as a cluster."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import FindCoordinatorRequest

from onceflow.core import faults
from onceflow.kafka.config import kafka_python_config
from onceflow.sinks.kafka.ids import pooled_id
from onceflow.sinks.kafka.participant import AFTER_END_TXN, KafkaSinkParticipant
from onceflow.sinks.kafka.handle import handles_of
from onceflow.sinks.kafka.coordinators import describe_transactions, TransactionState
from onceflow.core.participant import Outcome
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


def test_a_commit_writes_the_marker_its_coordinator_dropped_for_a_partition_whose_leader_died(cluster, tmp_path):
    # The one broker holding the output partition is down when the commit ends the transaction: Apache
    # Kafka's coordinator reports CompleteCommit at once, and the marker is never written, not even after
    # the broker returns. Taking the coordinator's word would send the Asset event for records no reader
    # will ever see; waiting would wait for ever, and the transaction holds the partition back.
    config = {"bootstrap.servers": cluster.bootstrap}
    pipeline = f"p-{uuid.uuid4().hex[:6]}"
    coordinators = {coordinator_of(config, pooled_id(pipeline, "out", s, 1)) for s in (0, 1)}
    # The output partition's one replica goes on a broker that coordinates neither split.
    holder = min(set(AdminClient(config).list_topics(timeout=10).brokers) - coordinators)
    topic = create_topic(config, partitions=1, prefix="unreplicated", topic_config={"min.insync.replicas": "1"},
                         on_broker=holder)
    # Two splits in the one partition, split 1's records first: the hanging transaction of each holds
    # back the other's records, whichever marker is written first.
    vote = precommit_batch(config, topic, tmp_path, pipeline, (50, 30), order=(1, 0))
    participant = KafkaSinkParticipant("out", pipeline, config, staging_root=str(tmp_path), timeout_s=3)
    split = handles_of(vote)[0]

    cluster.kill(holder - 1)
    try:
        await_fenced(config, holder)  # out of every ISR, so EndTxn's PrepareCommit is written at once
        while_down = participant.commit(vote)
        dropped = describe_transactions(config, [split.transactional_id])[split.transactional_id]
    finally:
        cluster.start(holder - 1)
    finished = participant.commit(vote)

    assert while_down.outcome is Outcome.RETRY_LATER, while_down.detail
    assert dropped.state is TransactionState.COMPLETE_COMMIT  # what the coordinator claims, marker or not
    assert finished.outcome is Outcome.DONE, finished.detail
    assert finished.detail.count("without the commit marker of partition(s) [0], written now (p0: written)") == 2
    assert Counter(v for _, v, _ in read_committed(config, topic, 1, timeout_s=60)) == Counter(
        [batch_value(1, 0, i) for i in range(50)] + [batch_value(1, 1, i) for i in range(30)])  # the originals, no repair
    assert participant.commit(vote).outcome is Outcome.ALREADY_DONE
