"""Local filesystem storage (``/path`` or ``file:///path``) through os/pathlib.

Create-if-absent as docs/protocol.md ("The ledger") gives it: write a temp file in the same
directory, fsync it, ``os.link`` it to the final name (fails with EEXIST,
atomically across processes, if the name exists), fsync the directory so the
new name survives a power loss. Renames are fsynced in their parent too.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator
from urllib.parse import urlparse

from onceflow.storage.base import TMP_PREFIX, RenamingStorage

# errno values of a filesystem without hard links (some network and FUSE mounts)
_NO_HARD_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP)


def local_path(uri: str) -> Path:
    parsed = urlparse(uri)
    return Path(parsed.path if parsed.scheme == "file" else uri)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(directory: Path, data: bytes) -> str:
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


class LocalStorage(RenamingStorage):
    kind = "local"

    def __repr__(self) -> str:
        return "LocalStorage()"

    @contextmanager
    def open_write(self, path: str) -> Iterator[BinaryIO]:
        target = local_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return local_path(path).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def size(self, path: str) -> int | None:
        try:
            return local_path(path).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def exists(self, path: str) -> bool:
        return local_path(path).exists()

    def list_dir(self, path: str) -> dict[str, int | None]:
        try:
            entries = list(os.scandir(local_path(path)))
        except (FileNotFoundError, NotADirectoryError):
            return {}
        return {e.name: (None if e.is_dir() else e.stat().st_size) for e in entries}

    def list_tree(self, path: str) -> list[str]:
        base = local_path(path)
        return sorted(
            Path(dirpath, name).relative_to(base).as_posix()
            for dirpath, _dirs, files in os.walk(base)
            for name in files
            if not name.startswith(TMP_PREFIX)
        )

    def create_if_absent(self, path: str, data: bytes) -> bool:
        target = local_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _write_temp(target.parent, data)
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        fsync_dir(target.parent)
        return True

    def replace(self, path: str, data: bytes) -> None:
        target = local_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(_write_temp(target.parent, data), target)
        fsync_dir(target.parent)

    def delete(self, path: str) -> None:
        local_path(path).unlink(missing_ok=True)

    def delete_tree(self, path: str) -> bool:
        target = local_path(path)
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
            return True
        if target.exists():
            target.unlink(missing_ok=True)
            return True
        return False

    def rename(self, src: str, dst: str) -> None:
        source, target = local_path(src), local_path(dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():  # os.rename would silently replace an empty directory
            raise FileExistsError(f"cannot rename {source} to {target}: it exists")
        os.rename(source, target)
        fsync_dir(target.parent)

    def explain(self, exc: BaseException) -> str:
        if isinstance(exc, OSError) and exc.errno in _NO_HARD_LINKS:
            return (
                f"the filesystem does not support hard links, which atomic create-if-absent needs ({exc.strerror}). "
                "Put the warehouse on a local disk, HDFS or S3"
            )
        what = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        return f"{what}. Check that the directory exists on a local disk and is writable by this user, then retry the task"
