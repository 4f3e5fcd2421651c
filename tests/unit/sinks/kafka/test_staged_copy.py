"""A split's staged copy written on a thread of its own (pure logic, a local file)."""

from __future__ import annotations

import hashlib
import time
from contextlib import contextmanager

import pyarrow as pa
import pytest

from onceflow.sinks.kafka.staged import StagedCopyWriter, open_staged
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


class _FailingFile:
    """A file that refuses its second write: the disk filled up under the copy."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data) -> int:
        self.writes += 1
        if self.writes > 1:
            raise OSError(28, "No space left on device")
        return memoryview(data).nbytes

    def flush(self) -> None:
        pass


class _SlowFile:
    """A file on a slow store: each write takes a while."""

    def __init__(self) -> None:
        self.writing = False
        self.started = 0

    def write(self, data) -> int:
        self.started += 1
        self.writing = True
        time.sleep(0.05)
        self.writing = False
        return memoryview(data).nbytes

    def flush(self) -> None:
        pass


class _RecordingStorage:
    """Hands out files of ``file_class`` and keeps what ended each one's write context."""

    def __init__(self, file_class=_FailingFile) -> None:
        self.ended_with: list[BaseException | None] = []
        self.files: list = []
        self.file_class = file_class

    @contextmanager
    def open_write(self, path: str):
        self.files.append(self.file_class())
        try:
            yield self.files[-1]
        except BaseException as exc:
            self.ended_with.append(exc)
            raise
        self.ended_with.append(None)


def test_a_failed_write_surfaces_when_the_copy_is_closed_and_the_storage_is_told_not_to_keep_it():
    storage = _RecordingStorage()
    copy = StagedCopyWriter(storage, "memory://split-00000")
    copy.write([0] * 10, _batch(0, 10))
    copy.close()

    with pytest.raises(OSError, match="No space left"):
        copy.closed()
    assert len(storage.ended_with) == 1 and isinstance(storage.ended_with[0], OSError)


def test_a_failed_write_surfaces_at_the_next_write_before_more_is_queued():
    copy = StagedCopyWriter(_RecordingStorage(), "memory://split-00000")
    copy.write([0] * 10, _batch(0, 10))
    with pytest.raises(OSError, match="No space left"):
        copy.write([0] * 10, _batch(10, 10))
    copy.discard()


def test_a_discarded_copy_is_neither_completed_nor_still_written_once_discard_returns():
    # A pre-commit that failed gives the copy up: nothing may reach the storage after that (an abort
    # may be deleting the batch's staging), and an incomplete copy must not be completed.
    storage = _RecordingStorage(_SlowFile)
    copy = StagedCopyWriter(storage, "memory://split-00000")
    schema_writes = storage.files[0].started
    copy.write([0] * 10, _batch(0, 10))
    while storage.files[0].started == schema_writes:  # the batch is being written
        time.sleep(0.001)
    copy.close()
    copy.discard()

    assert not storage.files[0].writing
    assert storage.ended_with == []
