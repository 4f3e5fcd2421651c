import pytest

from tests.integration.ledger.backends import BACKENDS, storage_factory


@pytest.fixture(params=BACKENDS)
def new_storage(request, tmp_path):
    """Callable returning a fresh storage on each of local, hadoop (file://), s3 (moto)."""
    return storage_factory(request, request.param, tmp_path)


@pytest.fixture
def storage(new_storage):
    return new_storage()
