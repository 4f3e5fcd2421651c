"""Settings from the environment fail fast, name the fix and never fall back
(pure logic: boto3's credential chain is pointed at empty files, no network)."""

from __future__ import annotations

import pytest

from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.pipeline.runtime import Deployment
from onceflow.config.s3_connection import S3Connection
from onceflow.config.settings import ConfigurationError


@pytest.fixture
def no_aws(monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION",
                "AWS_REGION", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_WEB_IDENTITY_TOKEN_FILE", "ONCEFLOW_S3_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    return monkeypatch


def test_no_kafka_bootstrap_names_the_variable_and_bad_config_json_names_its_own(monkeypatch):
    monkeypatch.delenv("ONCEFLOW_KAFKA_BOOTSTRAP", raising=False)
    with pytest.raises(ConfigurationError, match="ONCEFLOW_KAFKA_BOOTSTRAP is not set"):
        KafkaCluster.from_environment()
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "kafka-1:9093,kafka-2:9093")
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONFIG", '{"security.protocol": "SASL_SSL", "sasl.password": "hunter2"}')
    cluster = KafkaCluster.from_environment()
    assert cluster.config()["bootstrap.servers"] == "kafka-1:9093,kafka-2:9093"
    assert cluster.config()["security.protocol"] == "SASL_SSL"
    assert "hunter2" not in repr(cluster) and "SASL_SSL" in repr(cluster)
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONFIG", "{not json")
    with pytest.raises(ConfigurationError, match="ONCEFLOW_KAFKA_CONFIG"):
        KafkaCluster.from_environment()


def test_an_s3_warehouse_without_credentials_names_them(no_aws):
    no_aws.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with pytest.raises(ConfigurationError, match="warehouse s3://lake/w found no AWS credentials: set AWS_ACCESS_KEY_ID"):
        Deployment.from_environment("s3://lake/w")


def test_an_s3_warehouse_without_a_region_names_it(no_aws):
    no_aws.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    no_aws.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    with pytest.raises(ConfigurationError, match="has no AWS region: set AWS_DEFAULT_REGION"):
        Deployment.from_environment("s3://lake/w")


def test_keys_from_the_chain_are_used_and_no_endpoint_means_aws(no_aws):
    no_aws.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    no_aws.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    no_aws.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    no_aws.setenv("AWS_SESSION_TOKEN", "token")
    deployment = Deployment.from_environment("s3://lake/w")
    assert deployment.s3.endpoint_url is None and deployment.s3.access_key is None  # nothing copied: the chain answers
    credentials = deployment.s3.frozen_credentials()
    assert (credentials.access_key, credentials.token) == ("AKIAEXAMPLE", "token")
    assert "secret" not in deployment.to_option() and "AKIAEXAMPLE" not in deployment.to_option()


def test_half_a_key_pair_is_refused():
    with pytest.raises(ConfigurationError, match="half given"):
        S3Connection(access_key="AKIAEXAMPLE")


def test_no_warehouse_names_the_variable(monkeypatch):
    monkeypatch.delenv("ONCEFLOW_WAREHOUSE", raising=False)
    with pytest.raises(ConfigurationError, match="ONCEFLOW_WAREHOUSE is not set"):
        Deployment.from_environment()


def test_kafka_secrets_can_come_on_their_own_and_win(monkeypatch):
    from onceflow.config.settings import kafka_client_config

    monkeypatch.setenv("ONCEFLOW_KAFKA_CONFIG", '{"security.protocol": "SASL_SSL", "sasl.username": "svc"}')
    monkeypatch.setenv("ONCEFLOW_KAFKA_SECRETS", '{"sasl.password": "from-a-kubernetes-secret"}')
    assert kafka_client_config() == {"security.protocol": "SASL_SSL", "sasl.username": "svc", "sasl.password": "from-a-kubernetes-secret"}
    monkeypatch.setenv("ONCEFLOW_KAFKA_SECRETS", "[1]")
    with pytest.raises(ConfigurationError, match="ONCEFLOW_KAFKA_SECRETS must be a JSON object"):
        kafka_client_config()
