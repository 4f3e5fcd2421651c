"""The broker profile is part of the Kafka connection: chosen there, carried to every process
that takes the cluster, never handed to a client, and refused by name when unknown."""

from __future__ import annotations

import json

import pytest

from onceflow.config.deployment import Deployment
from onceflow.airflow.hooks.kafka import cluster_from_extra
from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.config.broker_profiles import PROFILE_KEY, PROFILES
from onceflow.config.settings import ConfigurationError


def test_apache_kafka_is_the_default_profile():
    cluster = cluster_from_extra("k", {"bootstrap.servers": "b:9092"})
    assert cluster.profile == "apache" and cluster.broker.hides_aborted and cluster.broker.concurrent_end_txn


def test_a_connection_names_its_profile_which_no_client_sees_and_every_process_gets(monkeypatch):
    cluster = cluster_from_extra("k", {"bootstrap.servers": "b:9092", "security.protocol": "SSL", PROFILE_KEY: "tansu"})
    assert cluster.profile == "tansu" and PROFILE_KEY not in cluster.config()
    assert (cluster.broker.hides_aborted, cluster.broker.concurrent_end_txn) == (False, False)
    # The spark task's environment carries the connection's extra; the job takes the cluster from it.
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "b:9092")
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONFIG", json.dumps(cluster.connection_extra()))
    taken = KafkaCluster.from_environment()
    assert (taken.config(), taken.profile) == (cluster.config(), "tansu")
    # A data source option carries it to executors.
    deployment = Deployment("file:///w", cluster)
    assert Deployment.from_option(deployment.to_option()).kafka.profile == "tansu"


def test_an_unknown_profile_is_refused_naming_the_setting_and_the_choices():
    with pytest.raises(ConfigurationError, match=rf"{PROFILE_KEY}='redpanda' is not a broker profile: use one of "
                                                 + ", ".join(PROFILES)):
        cluster_from_extra("k", {"bootstrap.servers": "b:9092", PROFILE_KEY: "redpanda"})
