"""What the ledger stores, and the envelope every record is stored in.

Each file is JSON::

    {"format": 2, "kind": "decision", "writer": "onceflow 0.1.0",
     "sha256": "<sha256 of the canonical body>", "body": {...}}

The checksum makes a truncated or hand-edited file detectable: onceflow
never acts on a record it cannot prove intact. ``format`` lets a newer
onceflow refuse loudly instead of misreading an older or newer ledger.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from onceflow import __version__
from onceflow.core.planning.intervals import Boundary, IntervalBatch
from onceflow.core.planning.interventions import Intervention
from onceflow.core.participant import Vote
from onceflow.core.plan import Plan
from onceflow.core.ledger.errors import LedgerCorruptError, LedgerFormatError

# 2: a plan's protocol facts are typed fields (``facts``), apart from the transform's run
# parameters; format 1 kept both in one ``params`` dictionary (``Plan.from_dict`` reads it).
# An older onceflow refuses format 2 rather than misread a plan's facts.
FORMAT = 2
# The oldest format this version still reads. Raise it when a format change
# is not readable any more; batches left unfinished in an older format must
# then be finished by the version that wrote them.
MIN_FORMAT = 1
WRITER = f"onceflow {__version__}"


class Kind(str, enum.Enum):
    PLAN = "plan"
    ATTEMPT = "attempt"
    VOTE = "vote"
    DECISION = "decision"
    DONE = "done"
    HEAD = "head"
    BOUNDARY = "boundary"
    INTERVAL_BATCH = "interval_batch"
    PREFIX_HINT = "prefix_hint"
    INTERVENTION = "intervention"
    FAILED = "failed"


class DecisionOutcome(str, enum.Enum):
    COMMIT = "COMMIT"
    ABORT = "ABORT"


@dataclass(frozen=True)
class AttemptClaim:
    """Attempt ``attempt`` of a batch was started (Spark job start)."""

    batch_seq: int
    attempt: int
    claimed_by: str
    claimed_at_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {"batch_seq": self.batch_seq, "attempt": self.attempt, "claimed_by": self.claimed_by, "claimed_at_ms": self.claimed_at_ms}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "AttemptClaim":
        return cls(int(raw["batch_seq"]), int(raw["attempt"]), str(raw["claimed_by"]), int(raw["claimed_at_ms"]))


@dataclass(frozen=True)
class RecordedVote:
    vote: Vote
    recorded_at_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {"vote": self.vote.to_dict(), "recorded_at_ms": self.recorded_at_ms}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "RecordedVote":
        return cls(Vote.from_dict(raw["vote"]), int(raw["recorded_at_ms"]))


@dataclass(frozen=True)
class Decision:
    """The outcome of a batch, written once (I2). A COMMIT names the attempt
    and embeds the exact votes it commits: nothing else is ever applied (I5)."""

    batch_seq: int
    outcome: DecisionOutcome
    attempt: int
    votes: Mapping[str, Vote]
    decided_by: str
    decided_at_ms: int
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_seq": self.batch_seq,
            "outcome": self.outcome.value,
            "attempt": self.attempt,
            "votes": {name: v.to_dict() for name, v in sorted(self.votes.items())},
            "decided_by": self.decided_by,
            "decided_at_ms": self.decided_at_ms,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Decision":
        return cls(
            batch_seq=int(raw["batch_seq"]),
            outcome=DecisionOutcome(raw["outcome"]),
            attempt=int(raw["attempt"]),
            votes={name: Vote.from_dict(v) for name, v in raw["votes"].items()},
            decided_by=str(raw["decided_by"]),
            decided_at_ms=int(raw["decided_at_ms"]),
            reason=str(raw.get("reason", "")),
        )


def _fields_of(record: Any) -> dict[str, Any]:
    """A flat record's fields in their declared order, an enum as its value (what the JSON holds)."""
    return {name: value.value if isinstance(value, enum.Enum) else value for name, value in vars(record).items()}


@dataclass(frozen=True)
class DoneMarker:
    """Effect ``effect`` of a decision was applied (one per participant, and
    ``BATCH_EFFECT`` once all of them were)."""

    batch_seq: int
    effect: str
    outcome: DecisionOutcome
    detail: str
    done_by: str
    done_at_ms: int

    def to_dict(self) -> dict[str, Any]:
        return _fields_of(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "DoneMarker":
        return cls(
            int(raw["batch_seq"]),
            str(raw["effect"]),
            DecisionOutcome(raw["outcome"]),
            str(raw.get("detail", "")),
            str(raw["done_by"]),
            int(raw["done_at_ms"]),
        )


@dataclass(frozen=True)
class FailedEffect:
    """A note, never the truth: the last FAILED answer of participant ``effect`` to the batch's decision
    (overwritten by the next one), kept so that ``onceflow status`` names what a person must fix."""

    batch_seq: int
    effect: str
    outcome: DecisionOutcome
    detail: str
    failed_by: str
    failed_at_ms: int

    def to_dict(self) -> dict[str, Any]:
        return _fields_of(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "FailedEffect":
        return cls(int(raw["batch_seq"]), str(raw["effect"]), DecisionOutcome(raw["outcome"]), str(raw.get("detail", "")),
                   str(raw["failed_by"]), int(raw["failed_at_ms"]))


@dataclass(frozen=True)
class Head:
    """A hint, never the truth: the latest batch seq and the latest committed
    seq some writer knew. Readers probe forward from it."""

    latest_seq: int
    last_committed_seq: int = 0
    updated_at_ms: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "latest_seq": self.latest_seq,
            "last_committed_seq": self.last_committed_seq,
            "updated_at_ms": self.updated_at_ms,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Head":
        return cls(int(raw["latest_seq"]), int(raw.get("last_committed_seq", 0)), int(raw.get("updated_at_ms", 0)), dict(raw.get("extra", {})))


@dataclass(frozen=True)
class PrefixHint:
    """A hint, never the truth: batch ``batch_seq`` ends the committed prefix of
    intervals at ``end_ms`` (interval pipelines; readers walk on from it)."""

    batch_seq: int
    end_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {"batch_seq": self.batch_seq, "end_ms": self.end_ms}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "PrefixHint":
        return cls(int(raw["batch_seq"]), int(raw["end_ms"]))


_DECODERS: dict[Kind, Callable[[Mapping[str, Any]], Any]] = {
    Kind.PLAN: Plan.from_dict,
    Kind.ATTEMPT: AttemptClaim.from_dict,
    Kind.VOTE: RecordedVote.from_dict,
    Kind.DECISION: Decision.from_dict,
    Kind.DONE: DoneMarker.from_dict,
    Kind.HEAD: Head.from_dict,
    Kind.BOUNDARY: Boundary.from_dict,
    Kind.INTERVAL_BATCH: IntervalBatch.from_dict,
    Kind.PREFIX_HINT: PrefixHint.from_dict,
    Kind.INTERVENTION: Intervention.from_dict,
    Kind.FAILED: FailedEffect.from_dict,
}


def _canonical(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def encode(kind: Kind, record: Any) -> bytes:
    body = record.to_dict()
    envelope = {
        "format": FORMAT,
        "kind": kind.value,
        "writer": WRITER,
        "sha256": hashlib.sha256(_canonical(body)).hexdigest(),
        "body": body,
    }
    return (json.dumps(envelope, sort_keys=True, indent=1) + "\n").encode()


_DONT_EDIT = (
    "Restore this file from a backup, the bucket's object version history or an HDFS snapshot; never "
    "hand-edit ledger files (each carries a checksum). If it cannot be restored, stop the pipeline and "
    "inspect the batch with `onceflow status` before deciding by hand."
)


def decode(kind: Kind, data: bytes, *, where: str, pipeline: str, batch: str) -> Any:
    """Decode and check one record. ``where`` is the file's full location."""
    context = f"pipeline {pipeline!r}, batch {batch}, file {where}"
    try:
        envelope = json.loads(data)
        version = int(envelope["format"])
    except (ValueError, TypeError, KeyError) as exc:
        raise LedgerCorruptError(f"unreadable ledger record ({exc.__class__.__name__}: {exc}) in {context}. {_DONT_EDIT}") from None
    writer = envelope.get("writer", "an unknown onceflow")
    if version > FORMAT:
        raise LedgerFormatError(
            f"{context} was written by a newer onceflow ({writer}, ledger format {version}; this is {WRITER}, "
            f"format {FORMAT}). Upgrade onceflow on every Airflow worker and Spark image of this pipeline."
        )
    if version < MIN_FORMAT:
        raise LedgerFormatError(
            f"{context} was written by an older onceflow ({writer}, ledger format {version}) that this {WRITER} no "
            f"longer reads (oldest format read: {MIN_FORMAT}). If the batch is unfinished (half-committed), finish it "
            f"with the older version (`onceflow recover`), then upgrade."
        )
    try:
        if envelope["kind"] != kind.value:
            raise ValueError(f"expected a {kind.value} record, found {envelope['kind']!r}")
        body = envelope["body"]
        if hashlib.sha256(_canonical(body)).hexdigest() != envelope["sha256"]:
            raise ValueError("checksum mismatch: the body was changed after it was written")
        return _DECODERS[kind](body)
    except (ValueError, TypeError, KeyError) as exc:
        raise LedgerCorruptError(f"corrupt ledger record ({exc}) in {context}. {_DONT_EDIT}") from None
