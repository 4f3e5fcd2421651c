"""The storage interface a file sink needs, and how a URI picks its storage.

One small implementation per kind of storage, one code path each:

- ``local``  (``/path`` or ``file:///path``): os/pathlib; promotion renames.
- ``hadoop`` (``hdfs://``, ``viewfs://``, any other Hadoop scheme, or
  ``file://`` when asked for): the JVM's ``org.apache.hadoop.fs.FileSystem``,
  the API Spark itself uses; promotion renames.
- ``s3``     (``s3://``, ``s3a://``): boto3 for metadata, pyarrow's S3 stream
  for writing; promotion is a server-side copy.

Every method is idempotent or says what it does when repeated, because
commit and abort may run any number of times after any crash.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import BinaryIO, ClassVar, Iterable

from . import layout


class MissingStagedFile(Exception):
    """A file named by a vote is neither staged nor promoted (I7: never success)."""


class Storage(ABC):
    kind: ClassVar[str]

    @abstractmethod
    def open_write(self, path: str) -> AbstractContextManager[BinaryIO]:
        """A new file at ``path`` (parents created). Fails if it exists.
        The file is complete once the context exits without error."""

    @abstractmethod
    def size(self, path: str) -> int | None:
        """Bytes in the file at ``path``, or None if there is none."""

    @abstractmethod
    def list_dir(self, path: str) -> dict[str, int | None]:
        """Children of ``path``: name -> size for files, None for directories.
        Empty if ``path`` does not exist."""

    @abstractmethod
    def read_bytes(self, path: str) -> bytes | None:
        """The whole file, or None if there is none."""

    @abstractmethod
    def create_if_absent(self, path: str, data: bytes) -> bool:
        """Atomically create ``path`` holding ``data``; False if it existed."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove one file; no error if it is already gone."""

    @abstractmethod
    def delete_tree(self, path: str) -> bool:
        """Remove ``path`` and everything below it; True if anything was there."""

    @abstractmethod
    def publish(self, staged_dir: str, target_dir: str, names: Iterable[str]) -> None:
        """Make exactly ``names`` of ``staged_dir`` visible in ``target_dir``.

        Resumes a publish interrupted by a crash. Files in either directory
        that are not in ``names`` (a failed or speculative task attempt's
        orphans) are never published. Raises MissingStagedFile when a name is
        in neither place."""

    def is_transient(self, exc: BaseException) -> bool:
        """Is ``exc`` worth a retry later (service unreachable) rather than a failure?"""
        return False


class RenamingStorage(Storage):
    """Storages with an atomic directory rename (local, Hadoop)."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Atomically move ``src`` to ``dst``, which must not exist."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Is there a file or directory at ``path``?"""

    def publish(self, staged_dir: str, target_dir: str, names: Iterable[str]) -> None:
        wanted = set(names)
        if not self.exists(target_dir) and self.exists(staged_dir):
            self._sweep(staged_dir, wanted)
            self.rename(staged_dir, target_dir)  # the common case: one atomic step
        # Resume after a crash (or a zombie that re-created the staging dir):
        # move what is still staged file by file, then drop strays.
        staged = self.list_dir(staged_dir)
        present = self.list_dir(target_dir)
        for name in sorted(wanted - present.keys()):
            if name not in staged:
                raise MissingStagedFile(f"{name} is neither in {staged_dir} nor in {target_dir}")
            self.rename(layout.join(staged_dir, name), layout.join(target_dir, name))
        self._sweep(target_dir, wanted | {layout.MANIFEST_NAME})

    def _sweep(self, directory: str, keep: set[str]) -> None:
        for name in self.list_dir(directory):
            if name not in keep:
                self.delete_tree(layout.join(directory, name))
