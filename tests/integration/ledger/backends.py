"""Fresh ledger storages on the three backends, for fixtures in tests/ledger
and tests/protocol. Each call gives an empty root, so hypothesis examples
and repeated runs never see each other's records."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Callable

import pytest

from onceflow.ledger.hadoop import HadoopLedgerStorage
from onceflow.ledger.local import LocalLedgerStorage
from onceflow.ledger.s3 import S3LedgerStorage
from onceflow.ledger.storage import LedgerStorage

BACKENDS = ("local", "hadoop", "s3")


def storage_factory(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Callable[[], LedgerStorage]:
    """A function returning a fresh, empty storage of ``backend`` per call."""
    if backend == "local":
        return lambda: LocalLedgerStorage(tmp_path / uuid.uuid4().hex[:8])
    if backend == "hadoop":
        spark = request.getfixturevalue("spark")
        return lambda: HadoopLedgerStorage((tmp_path / uuid.uuid4().hex[:8]).as_uri(), spark)
    if backend == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = request.getfixturevalue("s3_bucket")
        return lambda: S3LedgerStorage(bucket, f"root-{uuid.uuid4().hex[:8]}", endpoint)
    raise ValueError(backend)
