"""A write-only file that counts and hashes (sha256) what passes through it to the storage's stream.

The file sink's Parquet files and the Kafka sink's staged copies and withheld records are written
through it, so their size and digest, which votes and repairs check, cost no second read.
"""

from __future__ import annotations

import hashlib


class DigestingWriter:
    """Forwards every write to ``target`` and digests it; closing it leaves ``target`` to the storage's
    context, which closes it."""

    def __init__(self, target) -> None:
        self._target = target
        self._sha256 = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        view = memoryview(data)
        self._sha256.update(view)
        self._target.write(view)
        self.size += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._target.flush()

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def hexdigest(self) -> str:
        return self._sha256.hexdigest()
