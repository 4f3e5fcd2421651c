"""A split's staged copy written on a thread of its own (pure logic, a local file or a file double)."""

from __future__ import annotations

import hashlib
import threading
import time
from contextlib import contextmanager

import pyarrow as pa
import pytest

from onceflow.sinks.kafka.staged import StagedCopyGivenUp, StagedCopyWriter, open_staged
from onceflow.storage import storage_for


def _batch(first: int, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"key": [f"k{i}".encode() for i in range(first, first + n)],
                                       "value": [f"v{i}".encode() for i in range(first, first + n)]})


def test_the_copy_holds_every_batch_in_the_order_written_and_its_digest_is_of_its_bytes(tmp_path):
    uri = str(tmp_path / "split-00000-attempt-0.arrow")
    storage = storage_for(uri)
    copy = StagedCopyWriter(storage, uri)
    for first in range(0, 3000, 1000):
        copy.write([first // 1000] * 1000, _batch(first, 1000))
    copy.close()
    sha256 = copy.closed()

    assert sha256 == hashlib.sha256((tmp_path / "split-00000-attempt-0.arrow").read_bytes()).hexdigest()
    staged = open_staged(uri, storage, sha256)
    assert staged.column("value").to_pylist() == [f"v{i}".encode() for i in range(3000)]
    assert staged.column("partition").to_pylist() == [0] * 1000 + [1] * 1000 + [2] * 1000


class _File:
    """A file double: counts writes, refuses the ``fail_at``-th (the disk filled up), holds each write
    until ``release`` is set when ``held`` (a slow store)."""

    def __init__(self, fail_at: int = 0, held: bool = False) -> None:
        self.fail_at, self.held = fail_at, held
        self.started = 0
        self.release = threading.Event()

    def write(self, data) -> int:
        self.started += 1
        if self.started == self.fail_at:
            raise OSError(28, "No space left on device")
        if self.held and self.started > 1:  # the schema, written at the start, passes
            self.release.wait(10)
        return memoryview(data).nbytes

    def flush(self) -> None:
        pass


class _RecordingStorage:
    """Hands out ``_File``s and keeps how each one's write context ended: None (completed) or the exception."""

    def __init__(self, **file_options) -> None:
        self.ended_with: list[BaseException | None] = []
        self.files: list[_File] = []
        self.file_options = file_options

    @contextmanager
    def open_write(self, path: str):
        self.files.append(_File(**self.file_options))
        try:
            yield self.files[-1]
        except BaseException as exc:
            self.ended_with.append(exc)
            raise
        self.ended_with.append(None)


def _given_up_once(storage: _RecordingStorage) -> bool:
    """The storage was told once, and only once, not to keep the copy."""
    return len(storage.ended_with) == 1 and isinstance(storage.ended_with[0], StagedCopyGivenUp)


def test_a_failed_write_surfaces_when_the_copy_is_closed_and_the_storage_is_told_not_to_keep_it():
    storage = _RecordingStorage(fail_at=2)
    copy = StagedCopyWriter(storage, "memory://split-00000")
    copy.write([0] * 10, _batch(0, 10))
    copy.close()

    with pytest.raises(OSError, match="No space left"):
        copy.closed()
    assert _given_up_once(storage)


def test_a_failed_write_surfaces_at_the_next_write_and_every_call_after_so_no_copy_without_it_completes():
    storage = _RecordingStorage(fail_at=2)
    copy = StagedCopyWriter(storage, "memory://split-00000")
    copy.write([0] * 10, _batch(0, 10))
    with pytest.raises(OSError, match="No space left"):
        copy.write([0] * 10, _batch(10, 10))
    # A caller that goes on regardless gets the failure again, and the copy is never completed.
    with pytest.raises(OSError, match="No space left"):
        copy.write([0] * 10, _batch(20, 10))
    copy.close()
    with pytest.raises(OSError, match="No space left"):
        copy.closed()
    assert _given_up_once(storage)


def test_a_discarded_copy_is_given_up_once_its_write_under_way_ends_and_nothing_reaches_the_storage_after():
    # A pre-commit that failed gives the copy up: nothing may reach the storage after discard returns
    # (an abort may be deleting the batch's staging), and an incomplete copy must not be completed.
    storage = _RecordingStorage(held=True)
    copy = StagedCopyWriter(storage, "memory://split-00000")
    copy.write([0] * 10, _batch(0, 10))
    while storage.files[0].started < 2:  # the batch is being written, held by the store
        time.sleep(0.001)
    copy.close()
    discarding = threading.Thread(target=copy.discard)
    discarding.start()
    while not copy._closing.cancelled():  # the completion was dropped before it started
        time.sleep(0.001)
    storage.files[0].release.set()
    discarding.join(10)

    assert not discarding.is_alive()
    assert _given_up_once(storage)
    writes = storage.files[0].started
    time.sleep(0.1)
    assert storage.files[0].started == writes
