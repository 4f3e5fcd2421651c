"""The ledger storage for a root URI, by scheme: local, Hadoop FileSystem or S3."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from .storage import LedgerStorage


def open_ledger_storage(root_uri: str, *, spark: Any = None, s3: Any = None) -> LedgerStorage:
    """The storage for ``root_uri``, chosen by scheme.

    - a plain path or ``file://``: ``LocalLedgerStorage`` (os.link is atomic
      across processes; Hadoop's local FileSystem is not);
    - ``s3://bucket/prefix`` (or ``s3a://``): ``S3LedgerStorage``; ``s3`` is an
      ``S3Connection`` or a boto3 S3 client (required);
    - any other scheme (``hdfs://``, ``viewfs://``, ...): ``HadoopLedgerStorage``
      through ``spark``'s JVM (a SparkSession, or a py4j gateway); without one
      a JVM gateway is launched (about 2 s).
    """
    parsed = urlparse(root_uri)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        from .local import LocalLedgerStorage

        return LocalLedgerStorage(parsed.path if scheme else root_uri)
    if scheme in ("s3", "s3a"):
        from .s3 import S3LedgerStorage

        return S3LedgerStorage.from_uri(root_uri, s3)
    from .hadoop import HadoopLedgerStorage

    return HadoopLedgerStorage(root_uri, spark)
