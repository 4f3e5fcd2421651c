"""An operator's decision about an aborted batch that keeps failing: split it or skip it.

Planning already halves a replay that was aborted again (a batch too big or too
slow for its transaction timeout). A batch can also fail on every replay for a
reason size does not cure: a record the transform cannot handle, an output that
refuses one record. That needs a person, and leaves a trace::

    split  the next batch replays at most N records per partition of the aborted one
    skip   the next batch starts where the aborted one ends; its records were first
           copied to the pipeline's quarantine (nothing is lost), and the skip names them

An intervention concerns one ABORTED batch, the latest of an offsets pipeline. It
is written once (create-if-absent, like a decision) and says who and why. It is a
request: the next plan reads it and records it in its params, and only then has
it taken effect. A replay planned before the intervention was written ignores it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping

from onceflow.core.batch_id import BatchId
from onceflow.core.plan import OffsetRange


class Action(str, enum.Enum):
    SPLIT = "split"
    SKIP = "skip"


@dataclass(frozen=True)
class QuarantinedRange:
    """The records of ``range`` (as a read_committed consumer sees them), copied to ``path``."""

    range: OffsetRange
    records: int
    path: str

    def to_dict(self) -> dict[str, Any]:
        return {"range": self.range.to_dict(), "records": self.records, "path": self.path}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "QuarantinedRange":
        return cls(OffsetRange.from_dict(raw["range"]), int(raw["records"]), str(raw["path"]))


def is_blank(text: str) -> bool:
    """Who decided an intervention, and why, are said in words: the ledger, ``onceflow status`` and the
    page show them beside the batch."""
    return not text.strip()


@dataclass(frozen=True)
class Intervention:
    batch_seq: int
    action: Action
    by: str
    reason: str
    at_ms: int
    max_records_per_partition: int | None = None  # split: the replay's cap
    quarantine: tuple[QuarantinedRange, ...] = ()  # skip: where the skipped records are

    def __post_init__(self) -> None:
        if is_blank(self.by) or is_blank(self.reason):
            raise ValueError("an intervention names who made it and why")
        if (self.action is Action.SPLIT) != (self.max_records_per_partition is not None):
            raise ValueError("a split, and only a split, gives max_records_per_partition")
        if self.max_records_per_partition is not None and self.max_records_per_partition < 1:
            raise ValueError(f"max_records_per_partition must be >= 1, got {self.max_records_per_partition}")

    @property
    def quarantined_records(self) -> int:
        return sum(q.records for q in self.quarantine)

    def note(self) -> str:
        """One line for the next plan's params, ``onceflow status`` and the UI."""
        what = (f"split to at most {self.max_records_per_partition} records per partition" if self.action is Action.SPLIT
                else f"skipped, {self.quarantined_records} records quarantined")
        return f"batch {BatchId(self.batch_seq)} {what} by {self.by}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"batch_seq": self.batch_seq, "action": self.action.value, "by": self.by, "reason": self.reason,
                "at_ms": self.at_ms, "max_records_per_partition": self.max_records_per_partition,
                "quarantine": [q.to_dict() for q in self.quarantine]}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Intervention":
        cap = raw.get("max_records_per_partition")
        return cls(int(raw["batch_seq"]), Action(raw["action"]), str(raw["by"]), str(raw["reason"]), int(raw["at_ms"]),
                   None if cap is None else int(cap), tuple(QuarantinedRange.from_dict(q) for q in raw.get("quarantine", ())))
