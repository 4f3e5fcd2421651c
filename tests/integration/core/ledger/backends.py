"""Fresh ledger storages on each backend, for fixtures in tests/integration/core/ledger
and tests/integration/core: a local directory, Hadoop's FileSystem API on file:// and on
HDFS (a real NameNode), S3 (moto over HTTP). Each call gives an empty root, so
hypothesis examples and repeated runs never see each other's records."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Callable

import pytest

from onceflow.core.ledger.storage import LedgerStorage
from onceflow.storage.hadoop import HadoopStorage
from onceflow.storage.local import LocalStorage
from onceflow.storage.s3 import S3Storage

BACKENDS = ("local", "hadoop", "hdfs", "s3")


def backend_params(slow: tuple[str, ...] = ()) -> list:
    """BACKENDS as fixture params, those named in ``slow`` marked slow (left out of ``make test``)."""
    return [pytest.param(backend, marks=pytest.mark.slow) if backend in slow else backend for backend in BACKENDS]


def storage_factory(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Callable[[], LedgerStorage]:
    """A function returning a fresh, empty storage of ``backend`` per call."""
    if backend == "local":
        return lambda: LedgerStorage(LocalStorage(), str(tmp_path / uuid.uuid4().hex[:8]))
    if backend == "hadoop":
        request.getfixturevalue("spark")  # HadoopStorage uses the active SparkContext's JVM
        return lambda: LedgerStorage(HadoopStorage(), (tmp_path / uuid.uuid4().hex[:8]).as_uri())
    if backend == "hdfs":
        storage = request.getfixturevalue("hdfs_storage")
        cluster = request.getfixturevalue("hdfs_cluster")
        return lambda: LedgerStorage(storage, f"{cluster.uri}/ledger-{uuid.uuid4().hex[:8]}")
    if backend == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = request.getfixturevalue("s3_bucket")
        return lambda: LedgerStorage(S3Storage(endpoint), f"s3://{bucket}/root-{uuid.uuid4().hex[:8]}")
    raise ValueError(backend)
