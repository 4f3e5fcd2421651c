"""Ledger storage in a local (or NFS-free network) directory.

Runs wherever the ledger is read or written: Airflow worker, Spark driver.
create-if-absent = write a temp file, fsync it, ``os.link`` it to the final
name (link fails with EEXIST if the name exists, atomically, across
processes), fsync the directory so the new name survives a power loss.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ..localfs import TMP_PREFIX, create_file_if_absent, replace_file
from .errors import LedgerUnavailable
from .storage import check_key



class LocalLedgerStorage:
    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root).resolve()

    def __repr__(self) -> str:
        return f"LocalLedgerStorage({str(self.root)!r})"

    def describe(self, key: str) -> str:
        return str(self.root / key)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _unavailable(self, key: str, exc: OSError) -> LedgerUnavailable:
        return LedgerUnavailable(
            f"ledger storage unusable at {self.describe(key)}: {exc.strerror or exc}. "
            f"Check that {self.root} exists on a local disk and is writable by this user, then retry the task."
        )

    def create(self, key: str, data: bytes) -> bool:
        try:
            return create_file_if_absent(self._path(key), data)
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise LedgerUnavailable(
                    f"the filesystem holding {self.root} does not support hard links, which the ledger needs "
                    f"for atomic create-if-absent ({exc.strerror}). Put the ledger on a local disk, HDFS or S3."
                ) from exc
            raise self._unavailable(key, exc) from exc

    def read(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return None
        except OSError as exc:
            raise self._unavailable(key, exc) from exc

    def overwrite(self, key: str, data: bytes) -> None:
        try:
            replace_file(self._path(key), data)
        except OSError as exc:
            raise self._unavailable(key, exc) from exc

    def list(self, prefix: str) -> list[str]:
        base = self.root / prefix.rstrip("/") if prefix else self.root
        keys: list[str] = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if not name.startswith(TMP_PREFIX):
                    keys.append(Path(dirpath, name).relative_to(self.root).as_posix())
        return sorted(keys)
