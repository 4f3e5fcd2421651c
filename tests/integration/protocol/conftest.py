"""The protocol runs on every ledger backend: the same fixtures as tests/integration/ledger."""

from tests.integration.ledger.conftest import new_storage, storage  # noqa: F401  (pytest fixtures)
