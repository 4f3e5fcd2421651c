"""Where the services are: the embedded stack, or external ones from the environment.

Resolution order, per service:

1. ``ONCEFLOW_KAFKA_BOOTSTRAP`` (plus optional ``ONCEFLOW_KAFKA_CONFIG``, a
   JSON object of librdkafka settings such as ``security.protocol`` and
   ``sasl.*``, passed unchanged to every client) names an external Kafka.
   ``ONCEFLOW_S3_ENDPOINT`` names an external S3 endpoint; credentials come
   from the standard ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and
   ``AWS_DEFAULT_REGION`` variables.
2. Otherwise ``<ONCEFLOW_HOME>/stack.json`` written by ``onceflow services up``
   (``ONCEFLOW_HOME`` defaults to ``./.onceflow``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .services.kafka_broker import KafkaBroker
from .services.s3 import S3Endpoint
from .services.stack import EmbeddedStack


class ConfigurationError(ValueError):
    """A setting is missing or wrong; the message names it and the fix."""


def onceflow_home() -> Path:
    return Path(os.environ.get("ONCEFLOW_HOME", ".onceflow")).resolve()


def _embedded():
    return EmbeddedStack(onceflow_home()).info()


def kafka_broker() -> KafkaBroker:
    bootstrap = os.environ.get("ONCEFLOW_KAFKA_BOOTSTRAP")
    if bootstrap:
        raw = os.environ.get("ONCEFLOW_KAFKA_CONFIG", "{}")
        try:
            extra = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"ONCEFLOW_KAFKA_CONFIG is not valid JSON ({exc}); set it to an object of "
                'librdkafka settings, e.g. {"security.protocol": "SASL_SSL"}'
            ) from None
        if not isinstance(extra, dict):
            raise ConfigurationError("ONCEFLOW_KAFKA_CONFIG must be a JSON object of librdkafka settings")
        return KafkaBroker("external", bootstrap, client_config=extra)
    info = _embedded()
    if info is None:
        raise ConfigurationError(
            f"no Kafka broker: nothing runs under {onceflow_home()}. Run `onceflow services up`, "
            "or set ONCEFLOW_KAFKA_BOOTSTRAP to your cluster's bootstrap servers"
        )
    return info.kafka


def s3_endpoint() -> S3Endpoint:
    endpoint = os.environ.get("ONCEFLOW_S3_ENDPOINT")
    if endpoint:
        missing = [v for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not os.environ.get(v)]
        if missing:
            raise ConfigurationError(
                f"ONCEFLOW_S3_ENDPOINT is set but {' and '.join(missing)} is not: export the credentials for {endpoint}"
            )
        return S3Endpoint(
            endpoint,
            os.environ["AWS_ACCESS_KEY_ID"],
            os.environ["AWS_SECRET_ACCESS_KEY"],
            os.environ.get("AWS_DEFAULT_REGION", os.environ.get("AWS_REGION", "us-east-1")),
        )
    info = _embedded()
    if info is None:
        raise ConfigurationError(
            f"no S3 endpoint: nothing runs under {onceflow_home()}. Run `onceflow services up`, "
            "or set ONCEFLOW_S3_ENDPOINT (and AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
        )
    return info.s3
