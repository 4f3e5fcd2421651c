"""Connections become client settings: passed through, never defaulted."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.airflow.hooks.iceberg import catalog_properties
from onceflow.airflow.hooks.kafka import KafkaConfigHook, cluster_from_extra
from onceflow.airflow.hooks.s3 import S3ConnectionHook, connection_from_fields
from onceflow.provider import get_provider_info
from onceflow.config.settings import ConfigurationError


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


def test_every_connection_type_the_provider_declares_is_its_hooks_with_a_form():
    """What Airflow reads (the provider info) names hooks that exist and answer for that type;
    each form relabels the fields its hook reads."""
    declared = get_provider_info()["connection-types"]
    assert {d["connection-type"] for d in declared} >= {KafkaConfigHook.conn_type, S3ConnectionHook.conn_type}
    for entry in declared:
        module, _, name = entry["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), name)
        assert hook.conn_type == entry["connection-type"] and hook.hook_name == entry["hook-name"], entry
        behaviour = hook.get_ui_field_behaviour()
        assert behaviour["relabeling"] and not set(behaviour["relabeling"]) & set(behaviour.get("hidden_fields", ())), entry


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=300),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=30), inner, max_size=4),
                     max_leaves=10)
_extras = st.one_of(_json, st.dictionaries(st.sampled_from(["bootstrap.servers", "uri", "type", "endpoint_url",
                                                            "region_name", "aws_session_token", "security.protocol", ""]),
                                           _json, max_size=4))


@settings(max_examples=400, deadline=None)
@given(extra=_extras, login=st.none() | st.text(max_size=20), password=st.none() | st.text(max_size=20))
def test_any_connection_extra_is_read_or_refused_naming_the_connection(extra, login, password):
    """What a person can type into a connection form: each hook reads it, or refuses it naming the
    connection (and the setting), never with a client's error later."""
    for read in (lambda: cluster_from_extra("k", extra), lambda: catalog_properties("i", extra),
                 lambda: connection_from_fields(login, password, extra, "s")):
        try:
            read()
        except ConfigurationError as refused:
            assert "Airflow connection" in str(refused) or "S3 credentials are half given" in str(refused), refused
