"""Deployment settings from the environment (Spark driver, CLI).

- ``ONCEFLOW_KAFKA_BOOTSTRAP``: the Kafka cluster's bootstrap servers
  (required; ``KafkaCluster.from_environment``); ``ONCEFLOW_KAFKA_CONFIG``: a JSON object of librdkafka settings
  (``security.protocol``, ``sasl.*`` ...), passed unchanged to every client.
- ``ONCEFLOW_S3_ENDPOINT``: an S3-compatible endpoint (unset: AWS itself);
  region and credentials as ``onceflow.config.s3_connection`` says.
- ``ONCEFLOW_ICEBERG_CATALOGS``: a JSON object, catalog connection id ->
  pyiceberg catalog properties, for the pipeline's Iceberg sinks.

Nothing falls back to another endpoint or credential: a missing setting is a
``ConfigurationError`` naming it. Airflow tasks read connections instead
(``onceflow.airflow.hooks``).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

KAFKA_BOOTSTRAP_VAR = "ONCEFLOW_KAFKA_BOOTSTRAP"
KAFKA_CONFIG_VAR = "ONCEFLOW_KAFKA_CONFIG"
KAFKA_SECRETS_VAR = "ONCEFLOW_KAFKA_SECRETS"
ICEBERG_CATALOGS_VAR = "ONCEFLOW_ICEBERG_CATALOGS"


class ConfigurationError(ValueError):
    """A setting is missing or wrong; the message names it and the fix."""


def connection_extra(conn_id: str, extra: Any) -> dict[str, str | int | float | bool]:
    """An Airflow connection's ``extra`` as settings: a JSON object of plain values (what a person
    types in the connection form). Anything else is a ``ConfigurationError`` naming the connection
    and the key, never a client's later, vaguer error."""
    if extra is None or extra == "":
        return {}
    if not isinstance(extra, Mapping):
        raise ConfigurationError(
            f"Airflow connection {conn_id!r}: its extra must be a JSON object of settings, got "
            f"{type(extra).__name__} {str(extra)[:60]!r}"
        )
    for key, value in extra.items():
        if not isinstance(key, str) or not key or isinstance(value, (dict, list)) or value is None:
            raise ConfigurationError(
                f"Airflow connection {conn_id!r}: extra setting {str(key)[:80]!r} must be a string, number or "
                f"boolean, got {type(value).__name__} {str(value)[:60]!r}"
            )
    return dict(extra)


def kafka_client_config() -> dict:
    """``ONCEFLOW_KAFKA_CONFIG`` with ``ONCEFLOW_KAFKA_SECRETS`` over it, as a dict ({} when unset).
    The second lets a platform hand secrets to a process on their own (a Kubernetes
    secret as an environment variable) while the rest comes with the job."""
    return {**_json_object(KAFKA_CONFIG_VAR), **_json_object(KAFKA_SECRETS_VAR)}


def iceberg_catalogs() -> dict[str, dict]:
    """``ONCEFLOW_ICEBERG_CATALOGS``: catalog connection id -> its properties ({} when unset)."""
    catalogs = _json_object(ICEBERG_CATALOGS_VAR, 'e.g. {"onceflow_iceberg": {"type": "sql", "uri": "sqlite:///..."}}')
    bad = sorted(k for k, v in catalogs.items() if not isinstance(v, dict))
    if bad:
        raise ConfigurationError(f"{ICEBERG_CATALOGS_VAR}: the value of {bad} is not an object of catalog properties")
    return catalogs


def _json_object(var: str, example: str = 'of librdkafka settings, e.g. {"security.protocol": "SASL_SSL"}') -> dict:
    raw = os.environ.get(var) or "{}"
    try:
        extra = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{var} is not valid JSON ({exc}); set it to an object {example}") from None
    if not isinstance(extra, dict):
        raise ConfigurationError(f"{var} must be a JSON object {example}")
    return extra
