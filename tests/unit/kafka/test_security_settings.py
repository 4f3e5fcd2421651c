"""The security settings of a Kafka connection, as every onceflow client gets them (pure logic)."""

from __future__ import annotations

import json

import pytest

from onceflow.config.kafka_cluster import SASL_MECHANISMS, KafkaCluster
from onceflow.config.settings import ConfigurationError
from onceflow.kafka.config import kafka_python_config, principal
from onceflow.config.names import transactional_id_prefix
from onceflow.sinks.kafka.ids import transactional_id

SCRAM = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "onceflow-spark",
         "sasl.password": "s3cret", "ssl.ca.location": "/etc/kafka/ca.pem"}


def test_kafka_python_gets_the_scram_and_tls_settings_librdkafka_gets():
    assert kafka_python_config({"bootstrap.servers": "b:9093", **SCRAM}) == {
        "bootstrap_servers": "b:9093", "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "onceflow-spark", "sasl_plain_password": "s3cret", "ssl_cafile": "/etc/kafka/ca.pem"}


@pytest.mark.parametrize("mechanism", ["OAUTHBEARER", "oauthbearer", "AWS_MSK_IAM"])
def test_a_mechanism_not_every_client_speaks_is_refused_when_the_connection_is_read(mechanism):
    settings = {**SCRAM, "sasl.mechanism": mechanism}
    with pytest.raises(ConfigurationError, match=f"sasl.mechanism={mechanism!r} is not supported") as refused:
        KafkaCluster("b:9093", settings)
    assert ", ".join(SASL_MECHANISMS) in str(refused.value)
    with pytest.raises(ConfigurationError, match="is not supported"):  # a plain dict too, before any client is made
        kafka_python_config({"bootstrap.servers": "b:9093", **settings})


def test_the_principal_a_refusal_names_is_the_one_the_settings_sign_in_as():
    assert principal(SCRAM) == "User:onceflow-spark"
    assert principal({}) == "User:ANONYMOUS"
    assert principal({"security.protocol": "SSL"}) == "the principal of this client's TLS certificate"
    assert principal({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}) == "this client's Kerberos principal"


def test_a_clusters_environment_keeps_its_secrets_apart_and_reads_back_whole(monkeypatch):
    cluster = KafkaCluster("b:9093", SCRAM)
    env = cluster.environment()
    assert "s3cret" not in env["ONCEFLOW_KAFKA_CONFIG"]
    assert json.loads(env["ONCEFLOW_KAFKA_SECRETS"]) == {"sasl.password": "s3cret"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert KafkaCluster.from_environment() == cluster
    assert KafkaCluster("b:9092").environment() == {"ONCEFLOW_KAFKA_BOOTSTRAP": "b:9092"}


def test_a_pipelines_id_prefix_ends_at_the_separator_so_it_grants_no_other_pipeline():
    assert transactional_id_prefix("orders") == "onceflow.orders."
    assert transactional_id("orders", "daily", 0, 7).startswith(transactional_id_prefix("orders"))
    assert not transactional_id("orders2", "daily", 0, 7).startswith(transactional_id_prefix("orders"))
