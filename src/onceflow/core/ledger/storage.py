"""The ledger's view of a storage: keys under one root, errors as LedgerUnavailable.

Keys are ``/``-separated paths relative to the root. Every ledger record is
written with ``create`` (atomic create-if-absent, never an overwrite);
``overwrite`` exists only for the head hint, which readers treat as a hint.
``list`` is for tooling (``onceflow status --all``) and never on the hot
path: finding the latest state costs a constant number of requests.

The bytes go through ``onceflow.storage``, the layer the file and Kafka
sinks use too.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from onceflow.config.settings import ConfigurationError
from onceflow.storage import Storage, join, storage_for, warehouse_storage
from onceflow.core.ledger.errors import LedgerError, LedgerUnavailable

if TYPE_CHECKING:
    from onceflow.config.deployment import Deployment


def check_key(key: str) -> str:
    """Reject keys that could escape the root or alias another key."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid ledger key {key!r}: use a relative path without '.', '..' or empty parts")
    return key


class LedgerStorage:
    def __init__(self, storage: Storage, root: str):
        self.storage = storage
        self.root = root.rstrip("/")
        self._create_checked = False

    def __repr__(self) -> str:
        return f"LedgerStorage({self.storage!r}, {self.root!r})"

    def describe(self, key: str) -> str:
        """The full location of ``key`` (path or URI), for messages."""
        return join(self.root, check_key(key))

    @contextmanager
    def _reaching(self, location: str) -> Iterator[None]:
        try:
            yield
        except (LedgerError, ConfigurationError, ValueError):
            raise
        except Exception as exc:
            raise LedgerUnavailable(f"ledger storage unusable at {location}: {self.storage.explain(exc)}.") from exc

    def create(self, key: str, data: bytes) -> bool:
        """Write ``data`` at ``key`` if nothing is there, atomically. False if
        ``key`` exists (left untouched); of racing creators exactly one wins."""
        location = self.describe(key)
        with self._reaching(location):
            if not self._create_checked:  # before the first record: is create-if-absent atomic here?
                self.storage.check_create_if_absent(join(self.root, "_onceflow"))
                self._create_checked = True
            return self.storage.create_if_absent(location, data)

    def read(self, key: str) -> bytes | None:
        """The bytes at ``key``, or None if absent."""
        location = self.describe(key)
        with self._reaching(location):
            return self.storage.read_bytes(location)

    def overwrite(self, key: str, data: bytes) -> None:
        """Replace ``key`` atomically (last writer wins). Head hint only."""
        location = self.describe(key)
        with self._reaching(location):
            self.storage.replace(location, data)

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix``, sorted. Tooling only: cost grows with the ledger."""
        base = prefix.rstrip("/")
        location = self.describe(base) if base else self.root
        with self._reaching(location):
            found = self.storage.list_tree(location)
        return [f"{base}/{name}" if base else name for name in found]


def open_ledger_storage(root: str, storage: Storage | None = None) -> LedgerStorage:
    """The ledger under ``root`` (the warehouse), on ``storage`` or the one
    ``onceflow.storage.storage_for`` picks for ``root`` (an S3 root needs
    ``storage``: an ``S3Storage`` with its connection). Before its first
    record it checks that the storage's create-if-absent is atomic (S3: that
    the store honours conditional writes); a reader never writes."""
    return LedgerStorage(storage or storage_for(root), root)


def deployment_ledger_storage(deployment: Deployment) -> LedgerStorage:
    """The ledger of ``deployment``: ``_onceflow/`` keys under its warehouse, on the warehouse's storage."""
    return open_ledger_storage(deployment.warehouse, warehouse_storage(deployment))
