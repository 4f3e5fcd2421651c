"""The broker that coordinates a split's transaction dies in the middle of the commit, in a
3-broker Apache Kafka cluster (replication factor 3, min.insync.replicas 2): the commit that
recovery runs next finishes on the coordinator that took over, and every record is read
exactly once. Neither compatible broker runs as a cluster."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import FindCoordinatorRequest

from onceflow import faults
from onceflow.kafka.config import kafka_python_config
from onceflow.kafka.sink import AFTER_END_TXN, KafkaSinkParticipant, handles_of
from onceflow.protocol.participant import Outcome
from onceflow_devkit.services.apache_kafka import start_apache_cluster
from tests.conftest import TEST_HOME
from tests.integration.kafka.helpers import batch_value, create_topic, precommit_batch, read_committed

@pytest.fixture(scope="module")
def cluster():
    running = start_apache_cluster(TEST_HOME / f"cluster-{uuid.uuid4().hex[:6]}", die_with_parent=True)
    yield running
    running.stop(kill=True)


def coordinator_of(config, transactional_id: str) -> int:
    client = KafkaNetClient(**kafka_python_config(config))
    try:
        client.get_broker_version(10_000)
        found = client.send_and_receive(client.least_loaded_node(), FindCoordinatorRequest(
            key=transactional_id, key_type=1, coordinator_keys=[transactional_id]), timeout_ms=10_000)
        entry = found.coordinators[0] if found.coordinators else found
        assert entry.error_code == 0, entry
        return entry.node_id
    finally:
        client.close()


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
