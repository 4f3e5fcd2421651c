"""Ledger storage in a local (or NFS-free network) directory.

Runs wherever the ledger is read or written: Airflow worker, Spark driver.
create-if-absent = write a temp file, fsync it, ``os.link`` it to the final
name (link fails with EEXIST if the name exists, atomically, across
processes), fsync the directory so the new name survives a power loss.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from .errors import LedgerUnavailable
from .storage import check_key

_TMP_PREFIX = ".tmp-"


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

    def _write_temp(self, directory: Path, data: bytes) -> str:
        fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            os.unlink(tmp)
            raise
        return tmp

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def create(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._write_temp(path.parent, data)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise LedgerUnavailable(
                        f"the filesystem holding {self.root} does not support hard links, which the ledger needs "
                        f"for atomic create-if-absent ({exc.strerror}). Put the ledger on a local disk, HDFS or S3."
                    ) from exc
                raise
            finally:
                os.unlink(tmp)
            self._fsync_dir(path.parent)
            return True
        except LedgerUnavailable:
            raise
        except OSError as exc:
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
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._write_temp(path.parent, data)
            os.replace(tmp, path)
            self._fsync_dir(path.parent)
        except OSError as exc:
            raise self._unavailable(key, exc) from exc

    def list(self, prefix: str) -> list[str]:
        base = self.root / prefix.rstrip("/") if prefix else self.root
        keys: list[str] = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if not name.startswith(_TMP_PREFIX):
                    keys.append(Path(dirpath, name).relative_to(self.root).as_posix())
        return sorted(keys)
