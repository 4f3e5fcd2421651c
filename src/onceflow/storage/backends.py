"""The storage for a URI, by scheme: local, Hadoop FileSystem or S3."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping
from urllib.parse import urlparse

from onceflow.storage.base import Storage
from onceflow.config.settings import ConfigurationError
from onceflow.storage.hadoop import HadoopStorage
from onceflow.storage.local import LocalStorage
from onceflow.storage.s3 import OPTION_KEYS, S3Storage

if TYPE_CHECKING:
    from onceflow.config.deployment import Deployment


def storage_for(uri: str, kind: str | None = None, options: Mapping[str, str] | None = None) -> Storage:
    """The storage for ``uri``.

    - a plain path or ``file://``: ``LocalStorage`` (``os.link`` is atomic
      across processes; Hadoop's local FileSystem is not);
    - ``s3://`` / ``s3a://``: ``S3Storage`` from the ``s3.*`` ``options``
      (``S3Storage.options()``); without them a ConfigurationError, never AWS
      by default;
    - any other scheme (``hdfs://``, ``viewfs://``, ...): ``HadoopStorage``.

    ``kind`` forces one (``"hadoop"`` serves a ``file://`` URI through
    Hadoop's API, for tests of that code path)."""
    scheme = urlparse(uri).scheme.lower()
    if kind is None:
        kind = {"": "local", "file": "local", "s3": "s3", "s3a": "s3"}.get(scheme, "hadoop")
    if kind == "local":
        if scheme not in ("", "file"):
            raise ValueError(f"storage kind 'local' cannot serve {uri}: use a /path or file:// URI, or kind='hadoop'")
        return LocalStorage()
    if kind == "hadoop":
        return HadoopStorage()
    if kind == "s3":
        if scheme not in ("s3", "s3a"):
            raise ValueError(f"storage kind 's3' cannot serve {uri}: use an s3://bucket/prefix URI")
        if not any(k in (options or {}) for k in OPTION_KEYS):
            raise ConfigurationError(
                f"{uri} is on S3 but no S3 connection was given: pass storage=S3Storage(connection) "
                "(Airflow: S3ConnectionHook(conn_id).connection()) or the s3.* options"
            )
        return S3Storage.from_options(options)
    raise ValueError(f"unknown storage kind {kind!r} for {uri}: use 'local', 'hadoop' or 's3'")


def warehouse_storage(deployment: Deployment) -> Storage:
    """The storage of ``deployment``'s warehouse (local, Hadoop FS or S3, with its S3
    connection): the ledger, the file outputs and the Kafka sinks' staged copies all use it."""
    if deployment.on_s3:
        return S3Storage(deployment.s3)
    return storage_for(deployment.warehouse)


def warehouse_storage_options(deployment: Deployment) -> dict[str, str]:
    """Options that rebuild ``warehouse_storage`` in a Spark worker: endpoint and
    region only; credentials come from the worker's own chain (options show up
    in query plans)."""
    return warehouse_storage(deployment).options() if deployment.on_s3 else {}
