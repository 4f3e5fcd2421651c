"""The protocol runs on every ledger backend: the same fixtures as tests/integration/core/ledger."""

import json

import pytest

from tests.integration.core.ledger.backends import backend_params, storage_factory
from tests.integration.core.ledger.conftest import storage  # noqa: F401  (a pytest fixture)


@pytest.fixture(params=backend_params(slow=("hdfs",)))
def new_storage(request, tmp_path):
    """tests/integration/core/ledger's, with HDFS in the slow set: a random run makes thousands of
    records, a NameNode round trip or more each (about a minute)."""
    return storage_factory(request, request.param, tmp_path)


@pytest.fixture
def kafka_env(one_kafka_broker, monkeypatch):
    """The broker, named where the ``onceflow`` command looks for it (ONCEFLOW_KAFKA_*)."""
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", one_kafka_broker.bootstrap)
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONFIG", json.dumps(one_kafka_broker.client_config))
    return one_kafka_broker
