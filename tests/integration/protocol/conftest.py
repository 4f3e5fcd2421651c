"""The protocol runs on every ledger backend: the same fixtures as tests/integration/ledger."""

import json

import pytest

from tests.integration.ledger.conftest import new_storage, storage  # noqa: F401  (pytest fixtures)


@pytest.fixture
def kafka_env(one_kafka_broker, monkeypatch):
    """The broker, named where the ``onceflow`` command looks for it (ONCEFLOW_KAFKA_*)."""
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", one_kafka_broker.bootstrap)
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONFIG", json.dumps(one_kafka_broker.client_config))
    return one_kafka_broker
