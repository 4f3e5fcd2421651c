"""Kafka client settings from an Airflow connection (Airflow worker)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.config.settings import ConfigurationError, connection_extra

DEFAULT_CONN_ID = "onceflow_kafka"


def cluster_from_extra(conn_id: str, extra: dict) -> KafkaCluster:
    """The cluster a connection's ``extra`` (librdkafka settings) names.

    Every setting is passed unchanged to every client; ``bootstrap.servers``
    is required; ``onceflow.broker.profile`` (default ``apache``) names the broker's
    profile (``onceflow.config.broker_profiles``) and reaches no client.
    """
    config = connection_extra(conn_id, extra)
    bootstrap = config.pop("bootstrap.servers", None)
    if not isinstance(bootstrap, str) or not bootstrap.strip():
        raise ConfigurationError(
            f"Airflow connection {conn_id!r} has no 'bootstrap.servers' in its extra: set extra to a JSON "
            'object of librdkafka settings, e.g. {"bootstrap.servers": "broker:9092"}'
        )
    return KafkaCluster(str(bootstrap), config)


class KafkaConfigHook(BaseHook):
    """Reads a Kafka connection: type ``onceflow_kafka``, or ``kafka`` of the
    apache-kafka provider (the same format: extra = librdkafka settings)."""

    conn_name_attr = "kafka_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "onceflow_kafka"
    hook_name = "onceflow Kafka"

    def __init__(self, kafka_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any):
        super().__init__(**kwargs)
        self.kafka_conn_id = kafka_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "login", "password", "port", "host"],
            "relabeling": {"extra": "librdkafka settings (JSON), bootstrap.servers required"},
            "placeholders": {"extra": '{"bootstrap.servers": "broker1:9092,broker2:9092", "security.protocol": "SASL_SSL"}'},
        }

    def cluster(self) -> KafkaCluster:
        conn = self.get_connection(self.kafka_conn_id)
        return cluster_from_extra(self.kafka_conn_id, conn.extra_dejson)
