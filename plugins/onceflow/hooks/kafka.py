"""Kafka client settings from an Airflow connection (Airflow worker)."""

from __future__ import annotations

from ..services.kafka_broker import KafkaBroker
from ..settings import ConfigurationError

DEFAULT_CONN_ID = "onceflow_kafka"


def broker_from_extra(conn_id: str, extra: dict) -> KafkaBroker:
    """The broker a connection's ``extra`` (librdkafka settings) names.

    Every setting is passed unchanged to every client; ``bootstrap.servers``
    is required.
    """
    config = dict(extra or {})
    bootstrap = config.pop("bootstrap.servers", None)
    if not bootstrap:
        raise ConfigurationError(
            f"Airflow connection {conn_id!r} has no 'bootstrap.servers' in its extra: set extra to a JSON "
            'object of librdkafka settings, e.g. {"bootstrap.servers": "broker:9092"}'
        )
    return KafkaBroker("external", str(bootstrap), client_config=config)


class KafkaConfigHook:
    """Reads a Kafka connection (apache-kafka provider format)."""

    conn_name_attr = "kafka_conn_id"
    default_conn_name = DEFAULT_CONN_ID

    def __init__(self, kafka_conn_id: str = DEFAULT_CONN_ID):
        self.kafka_conn_id = kafka_conn_id

    def broker(self) -> KafkaBroker:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(self.kafka_conn_id)
        return broker_from_extra(self.kafka_conn_id, conn.extra_dejson)
