"""What a vote and a manifest say about each file: ``FileEntry`` and ``Manifest``.

Runs anywhere. Both serialise to plain JSON; the manifest's bytes are
deterministic (sorted keys, no timestamps), so a repeated commit can tell
"already committed, same files" from "committed with other files" by
comparing bytes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class FileEntry:
    """One pre-committed Parquet file, as the task attempt that wrote it saw it."""

    path: str          # full URI: under the attempt's staging, or (pending) its committed name
    name: str          # base name; the promoted file keeps it
    size: int          # bytes
    rows: int
    sha256: str        # hex digest of the file's bytes
    split: int         # Spark partition id (input split)
    task_attempt: int  # the Spark task attempt that wrote it (TaskContext.taskAttemptId())
    # A pending file (``onceflow.storage.PendingStorage``, S3): what completes it at ``path``. None: staged.
    upload: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        raw = asdict(self)
        if self.upload is None:
            del raw["upload"]  # a staged file's entry reads as it always did
        return raw

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "FileEntry":
        return cls(str(raw["path"]), str(raw["name"]), int(raw["size"]), int(raw["rows"]),
                   str(raw["sha256"]), int(raw["split"]), int(raw["task_attempt"]), raw.get("upload"))


@dataclass(frozen=True)
class Manifest:
    """The ``_SUCCESS`` file of a committed batch: the only proof it is committed."""

    participant: str
    batch_seq: int
    attempt: int
    files: tuple[Mapping[str, Any], ...]  # name, size, rows, sha256 per file
    # The committed batch this one replaces (a reprocessed interval): from the
    # moment this manifest exists, that batch is no longer committed output.
    replaces: int | None = None

    @classmethod
    def of(cls, participant: str, batch_seq: int, attempt: int, entries: Sequence[FileEntry],
           replaces: int | None = None) -> "Manifest":
        files = tuple(
            {"name": e.name, "size": e.size, "rows": e.rows, "sha256": e.sha256}
            for e in sorted(entries, key=lambda e: e.name)
        )
        return cls(participant, batch_seq, attempt, files, replaces)

    @property
    def rows(self) -> int:
        return sum(int(f["rows"]) for f in self.files)

    def to_bytes(self) -> bytes:
        body = {"participant": self.participant, "batch_seq": self.batch_seq, "attempt": self.attempt,
                "rows": self.rows, "files": list(self.files)}
        if self.replaces is not None:  # absent otherwise: a manifest's bytes do not change across versions
            body["replaces"] = self.replaces
        return json.dumps(body, sort_keys=True, indent=1).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Manifest":
        raw = json.loads(data)
        return cls(str(raw["participant"]), int(raw["batch_seq"]), int(raw["attempt"]),
                   tuple(dict(f) for f in raw["files"]), raw.get("replaces"))
