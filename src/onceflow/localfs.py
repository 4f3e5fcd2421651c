"""Atomic create-if-absent of a file on a local filesystem (shared by the
ledger and the file sink): write a temp file in the same directory, fsync
it, ``os.link`` it to the final name (fails with EEXIST, atomically across
processes, if the name exists), fsync the directory so the new name
survives a power loss."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

TMP_PREFIX = ".tmp-"


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


def create_file_if_absent(path: Path, data: bytes) -> bool:
    """True if ``path`` was created with ``data``; False if it already existed
    (its content untouched). Creates parent directories. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_temp(path.parent, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    fsync_dir(path.parent)
    return True


def replace_file(path: Path, data: bytes) -> None:
    """Atomically replace ``path``'s content (readers see old or new, whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(_write_temp(path.parent, data), path)
    fsync_dir(path.parent)
