"""Fresh ledger storages on the three backends, for fixtures in tests/ledger
and tests/protocol. Each call gives an empty root, so hypothesis examples
and repeated runs never see each other's records."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Callable

import pytest

from onceflow.ledger.storage import LedgerStorage
from onceflow.storage.hadoop import HadoopStorage
from onceflow.storage.local import LocalStorage
from onceflow.storage.s3 import S3Storage

BACKENDS = ("local", "hadoop", "s3")


def storage_factory(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Callable[[], LedgerStorage]:
    """A function returning a fresh, empty storage of ``backend`` per call."""
    if backend == "local":
        return lambda: LedgerStorage(LocalStorage(), str(tmp_path / uuid.uuid4().hex[:8]))
    if backend == "hadoop":
        request.getfixturevalue("spark")  # HadoopStorage uses the active SparkContext's JVM
        return lambda: LedgerStorage(HadoopStorage(), (tmp_path / uuid.uuid4().hex[:8]).as_uri())
    if backend == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = request.getfixturevalue("s3_bucket")
        return lambda: LedgerStorage(S3Storage(endpoint), f"s3://{bucket}/root-{uuid.uuid4().hex[:8]}")
    raise ValueError(backend)
