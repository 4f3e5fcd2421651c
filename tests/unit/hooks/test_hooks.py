"""Connections become client settings: passed through, never defaulted."""

from __future__ import annotations

import pytest

from onceflow.hooks.kafka import KafkaConfigHook, cluster_from_extra
from onceflow.hooks.s3 import S3ConnectionHook, connection_from_fields
from onceflow.settings import ConfigurationError


def test_a_kafka_connection_passes_every_setting_through_and_needs_bootstrap_servers():
    cluster = cluster_from_extra("k", {"bootstrap.servers": "b1:9092", "security.protocol": "SASL_SSL", "sasl.password": "pw"})
    assert cluster.config() == {"bootstrap.servers": "b1:9092", "security.protocol": "SASL_SSL", "sasl.password": "pw"}
    assert "pw" not in repr(cluster)
    with pytest.raises(ConfigurationError, match="connection 'k' has no 'bootstrap.servers'"):
        cluster_from_extra("k", {"security.protocol": "SSL"})


def test_an_s3_connection_without_keys_or_endpoint_means_the_default_chain_on_aws():
    connection = connection_from_fields(None, "", {"region_name": "eu-west-1"})
    assert (connection.endpoint_url, connection.access_key, connection.secret_key) == (None, None, None)
    assert connection.region == "eu-west-1"


def test_an_s3_connection_carries_static_keys_a_session_token_and_an_endpoint():
    connection = connection_from_fields("AKIA", "secret", {"endpoint_url": "http://minio:9000", "aws_session_token": "t"})
    assert (connection.access_key, connection.secret_key, connection.session_token) == ("AKIA", "secret", "t")
    assert connection.endpoint_url == "http://minio:9000" and connection.region is None  # no default region
    assert "secret" not in repr(connection)


def test_half_a_key_pair_in_a_connection_is_refused():
    with pytest.raises(ConfigurationError, match="half given"):
        connection_from_fields("AKIA", None, {})


def test_the_hooks_declare_their_connection_types_and_forms():
    assert (KafkaConfigHook.conn_type, S3ConnectionHook.conn_type) == ("onceflow_kafka", "onceflow_s3")
    assert "extra" in KafkaConfigHook.get_ui_field_behaviour()["relabeling"]
    assert "password" in S3ConnectionHook.get_ui_field_behaviour()["relabeling"]
