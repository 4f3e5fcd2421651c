"""The one storage interface of onceflow: the ledger, the file sinks and the
Kafka sinks' staged copies all go through it.

Paths are absolute URIs or local paths (``/data/x``, ``file:///data/x``,
``hdfs://nn/x``, ``s3://bucket/x``), joined with ``/``. One implementation per
kind of storage, one code path each:

- ``local``  (``/path`` or ``file:///path``): os/pathlib; create-if-absent by
  ``os.link``; promotion renames.
- ``hadoop`` (``hdfs://``, ``viewfs://``, any other Hadoop scheme, or
  ``file://`` on request): the JVM's ``org.apache.hadoop.fs`` API, the one
  Spark uses; create-if-absent by a non-overwriting rename; promotion renames.
- ``s3``     (``s3://``, ``s3a://``): boto3; create-if-absent by
  ``PutObject(If-None-Match: *)``; a file sink's files are written as pending
  multipart uploads to their final names and completed at commit
  (``PendingStorage``: no bytes copied); other staged files are promoted by a
  server-side copy.

Every method is idempotent or says what it does when repeated, because
commit and abort may run any number of times after any crash.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Any, BinaryIO, ClassVar, Iterable, Iterator, Mapping

# Names a storage writes before an atomic rename; listings never show them.
TMP_PREFIX = ".tmp-"


class MissingStagedFile(Exception):
    """A file named by a vote is neither staged nor promoted (I7: never success)."""


def join(base: str, *parts: str) -> str:
    """Join URI or path segments with ``/`` (every supported storage uses it)."""
    out = base.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


class Storage(ABC):
    kind: ClassVar[str]

    @abstractmethod
    def open_write(self, path: str) -> AbstractContextManager[BinaryIO]:
        """A new file at ``path`` (parents created). Fails if it exists.
        The file is complete once the context exits without error."""

    @abstractmethod
    def read_bytes(self, path: str) -> bytes | None:
        """The whole file, or None if there is none."""

    @abstractmethod
    def size(self, path: str) -> int | None:
        """Bytes in the file at ``path``, or None if there is none."""

    @abstractmethod
    def list_dir(self, path: str) -> dict[str, int | None]:
        """Children of ``path``: name -> size for files, None for directories.
        Empty if ``path`` does not exist."""

    @abstractmethod
    def list_tree(self, path: str) -> list[str]:
        """Every file below ``path``, as sorted ``/``-separated paths relative
        to it, without temp files. Cost grows with the tree: tooling only."""

    @abstractmethod
    def create_if_absent(self, path: str, data: bytes) -> bool:
        """Write ``data`` at ``path`` if nothing is there, atomically: readers
        see all of it or nothing, and of two processes racing for the same
        path exactly one gets True. False leaves the existing file untouched."""

    @abstractmethod
    def replace(self, path: str, data: bytes) -> None:
        """Replace the file at ``path`` atomically (last writer wins)."""

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
        in neither place. ``_``-prefixed names in ``target_dir`` are kept."""

    def check_create_if_absent(self, directory: str) -> None:
        """Fail with a ConfigurationError if ``create_if_absent`` is not atomic
        here (a store that ignores the condition). Default: nothing to check."""

    def is_transient(self, exc: BaseException) -> bool:
        """Is ``exc`` worth a retry later (service unreachable) rather than a failure?"""
        return False

    def explain(self, exc: BaseException) -> str:
        """What went wrong and what to check, for a message a user reads."""
        return f"{exc}. Check that the storage is reachable and writable by this user, then retry the task"


class PendingWrite:
    """A file being written that no reader will see until ``PendingStorage.complete_pending``:
    a writable stream, then (once closed) ``token``, what completing or aborting it needs."""

    token: Mapping[str, Any]

    def write(self, data) -> int:
        raise NotImplementedError


class PendingStorage(Storage):
    """A storage that can write a file whole at its final name yet keep it invisible until a
    commit completes it (S3's multipart uploads, the idea of Hadoop's S3A magic committer): the
    commit then costs a request per file, whatever the bytes, instead of a copy."""

    @abstractmethod
    def open_pending(self, path: str) -> AbstractContextManager[PendingWrite]:
        """A pending file at ``path``: invisible, and nothing at ``path`` changes, until completed.
        A writer that fails leaves nothing pending."""

    @abstractmethod
    def complete_pending(self, path: str, token: Mapping[str, Any]) -> bool:
        """Make the pending file visible at ``path``; True if this call did. Idempotent: a file
        completed before gives False; raises MissingStagedFile when it is neither pending nor there."""

    @abstractmethod
    def pending_alive(self, path: str, token: Mapping[str, Any]) -> bool:
        """Is the pending file still there to complete (not aborted, not completed)?"""

    @abstractmethod
    def abort_upload(self, path: str, token: Mapping[str, Any]) -> None:
        """Abort one pending file; nothing if it is gone already."""

    @abstractmethod
    def abort_pending(self, directory: str, keep: Iterable[str] = ()) -> int:
        """Abort every pending file directly in ``directory`` whose name is not in ``keep``
        (nothing of them stays stored or billed); how many were aborted."""

    @abstractmethod
    def pending_names(self, directory: str) -> Iterator[str]:
        """Names of the pending files directly in ``directory``."""


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
            self.rename(join(staged_dir, name), join(target_dir, name))
        self._sweep(target_dir, wanted, keep_underscored=True)

    def _sweep(self, directory: str, keep: set[str], keep_underscored: bool = False) -> None:
        for name in self.list_dir(directory):
            if name not in keep and not (keep_underscored and name.startswith("_")):
                self.delete_tree(join(directory, name))
