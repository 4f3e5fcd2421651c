"""Deployment settings from the environment (Spark driver, CLI).

- ``ONCEFLOW_KAFKA_BOOTSTRAP``: the Kafka cluster's bootstrap servers
  (required; ``KafkaCluster.from_environment``); ``ONCEFLOW_KAFKA_CONFIG``: a JSON object of librdkafka settings
  (``security.protocol``, ``sasl.*`` ...), passed unchanged to every client.
- ``ONCEFLOW_S3_ENDPOINT``: an S3-compatible endpoint (unset: AWS itself);
  region and credentials as ``onceflow.s3_connection`` says.

Nothing falls back to another endpoint or credential: a missing setting is a
``ConfigurationError`` naming it. Airflow tasks read connections instead
(``onceflow.hooks``).
"""

from __future__ import annotations

import json
import os

KAFKA_BOOTSTRAP_VAR = "ONCEFLOW_KAFKA_BOOTSTRAP"
KAFKA_CONFIG_VAR = "ONCEFLOW_KAFKA_CONFIG"
KAFKA_SECRETS_VAR = "ONCEFLOW_KAFKA_SECRETS"


class ConfigurationError(ValueError):
    """A setting is missing or wrong; the message names it and the fix."""


def kafka_client_config() -> dict:
    """``ONCEFLOW_KAFKA_CONFIG`` with ``ONCEFLOW_KAFKA_SECRETS`` over it, as a dict ({} when unset).
    The second lets a platform hand secrets to a process on their own (a Kubernetes
    secret as an environment variable) while the rest comes with the job."""
    return {**_json_object(KAFKA_CONFIG_VAR), **_json_object(KAFKA_SECRETS_VAR)}


def _json_object(var: str) -> dict:
    raw = os.environ.get(var) or "{}"
    try:
        extra = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"{var} is not valid JSON ({exc}); set it to an object of "
            'librdkafka settings, e.g. {"security.protocol": "SASL_SSL"}'
        ) from None
    if not isinstance(extra, dict):
        raise ConfigurationError(f"{var} must be a JSON object of librdkafka settings")
    return extra
