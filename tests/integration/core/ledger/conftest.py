import pytest

from tests.integration.core.ledger.backends import backend_params, storage_factory


@pytest.fixture(params=backend_params())
def new_storage(request, tmp_path):
    """Callable returning a fresh storage on each of local, hadoop (file://), hdfs, s3 (moto)."""
    return storage_factory(request, request.param, tmp_path)


@pytest.fixture
def storage(new_storage):
    return new_storage()
