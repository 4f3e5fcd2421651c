"""The storage under a ledger: four calls, one of them atomic.

Keys are ``/``-separated paths relative to the storage root. Every ledger
record is written with ``create`` (atomic create-if-absent, never an
overwrite); ``overwrite`` exists only for the head hint, which readers treat
as a hint. ``list`` is for tooling (``onceflow status --all``) and never on
the hot path: finding the latest state costs a constant number of requests.

Backends: ``LocalLedgerStorage`` (a directory), ``HadoopLedgerStorage`` (any
Hadoop FileSystem URI through a JVM: hdfs://, file://), ``S3LedgerStorage``
(conditional PutObject). ``backends.open_ledger_storage`` picks one by URI scheme.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class LedgerStorage(Protocol):
    def create(self, key: str, data: bytes) -> bool:
        """Write ``data`` at ``key`` if nothing is there, atomically: readers
        see all of it or nothing. False if ``key`` already exists (it is
        left untouched). Safe against a concurrent ``create`` of the same key
        from another process: exactly one of them returns True."""

    def read(self, key: str) -> bytes | None:
        """The bytes at ``key``, or None if absent."""

    def overwrite(self, key: str, data: bytes) -> None:
        """Replace ``key`` atomically (last writer wins). Head hint only."""

    def list(self, prefix: str) -> list[str]:
        """Keys under ``prefix``, sorted. Tooling only: cost grows with the ledger."""

    def describe(self, key: str) -> str:
        """The full location of ``key`` (path or URI), for messages."""


def check_key(key: str) -> str:
    """Reject keys that could escape the root or alias another key."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid ledger key {key!r}: use a relative path without '.', '..' or empty parts")
    return key
