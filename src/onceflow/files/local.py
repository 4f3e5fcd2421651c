"""Local filesystem storage (``/path`` or ``file:///path``) through os/pathlib.

Create-if-absent is DESIGN.md's recipe: temp file, fsync, ``os.link`` to the
final name (fails if it exists), fsync the directory. Renames are fsynced in
their parent so a promoted batch survives a power cut.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator
from urllib.parse import urlparse

from ..localfs import create_file_if_absent, fsync_dir
from .storage import RenamingStorage


def local_path(uri: str) -> Path:
    parsed = urlparse(uri)
    return Path(parsed.path if parsed.scheme == "file" else uri)


class LocalStorage(RenamingStorage):
    kind = "local"

    @contextmanager
    def open_write(self, path: str) -> Iterator[BinaryIO]:
        target = local_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())

    def size(self, path: str) -> int | None:
        try:
            return local_path(path).stat().st_size
        except FileNotFoundError:
            return None

    def exists(self, path: str) -> bool:
        return local_path(path).exists()

    def list_dir(self, path: str) -> dict[str, int | None]:
        try:
            entries = list(os.scandir(local_path(path)))
        except (FileNotFoundError, NotADirectoryError):
            return {}
        return {e.name: (None if e.is_dir() else e.stat().st_size) for e in entries}

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return local_path(path).read_bytes()
        except FileNotFoundError:
            return None

    def create_if_absent(self, path: str, data: bytes) -> bool:
        return create_file_if_absent(local_path(path), data)

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
