"""A split's handle: what the vote records of one split's open transaction (pure logic).

Made on a Spark executor (``writer.TransactionalSplitWriter.precommit``), read
on an Airflow worker by every commit-side job (verify, commit, repair, abort).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Mapping

from onceflow.core.participant import Vote
from onceflow.core.plan import EXACTLY_ONCE
from onceflow.sinks.kafka.headers import record_headers

# The transaction protocol version librdkafka's producers begin on (confluent-kafka 2.x: v1; KIP-890's
# v2 is not spoken). Recorded in each handle: the commit's EndTxn takes that version's path.
TRANSACTION_VERSION = 1


@dataclass(frozen=True)
class PartitionWrite:
    first_offset: int  # offset of this split's first record in the partition
    count: int         # records of this split in the partition
    last_offset: int   # offset of its last record (other splits' records may lie in between)


@dataclass(frozen=True)
class TxnHandle:
    """Everything the commit task needs to end (or repair) a split's open transaction."""

    pipeline: str
    sink: str
    batch_id: str
    split: int
    topic: str
    transactional_id: str
    producer_id: int
    epoch: int
    first_write_ms: int
    partitions: Mapping[int, PartitionWrite] = field(default_factory=dict)
    staged_uri: str = ""
    # SHA-256 of the staged copy's bytes: a repair refuses a copy that changed ("" in older votes).
    staged_sha256: str = ""
    # Records too large for the topic: not produced, kept with their reason (the commit publishes them).
    withheld: int = 0
    withheld_uri: str = ""
    withheld_sha256: str = ""
    # The producer's message.max.bytes (the topic's limit): a repair's producer must keep to it too.
    max_record_bytes: int = 0
    # The headers' format (``headers.FORMATS``); 0 in votes from before this field.
    record_format: int = 0
    # The transaction protocol version the producer began on (``txn_protocol``); 0 in votes
    # from before this field, whose producers all spoke v1.
    transaction_version: int = 0
    # The output's delivery guarantee: anything but exactly_once was written without a transaction
    # (``DirectSplitWriter``), visible as soon as the job flushed it.
    guarantee: str = EXACTLY_ONCE

    @property
    def transactional(self) -> bool:
        return self.guarantee == EXACTLY_ONCE

    @property
    def records(self) -> int:
        return sum(w.count for w in self.partitions.values())

    @property
    def identity(self) -> tuple[str, int, int, int]:
        """(transactional id, producer id, epoch, transaction version): what EndTxn names."""
        return self.transactional_id, self.producer_id, self.epoch, self.transaction_version or TRANSACTION_VERSION

    def where(self) -> str:
        """The split as every answer about it names it."""
        return f"batch {self.batch_id} split {self.split} ({self.transactional_id}) on {self.topic}"

    def to_dict(self) -> dict[str, Any]:
        raw = asdict(self)
        raw["partitions"] = {str(p): asdict(w) for p, w in self.partitions.items()}
        return raw

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "TxnHandle":
        known = {f.name for f in fields(cls)}  # a newer onceflow's fields are left out, not refused
        values = {k: v for k, v in raw.items() if k in known}
        values["partitions"] = {int(p): PartitionWrite(**w) for p, w in raw.get("partitions", {}).items()}
        return cls(**values)


def handle_headers(h: TxnHandle) -> list[tuple[str, bytes]]:
    """The headers the split of ``h`` put on its records (and a repair of it puts first).
    A vote from before ``record_format`` wrote format 2, or 1 if it has no staged_sha256 either."""
    return record_headers(h.batch_id, h.split, h.transactional_id, h.record_format or (2 if h.staged_sha256 else 1))


def vote_payload(handles: Iterable[TxnHandle]) -> dict[str, Any]:
    """The Kafka sink's vote payload (JSON-serialisable)."""
    return {"handles": [h.to_dict() for h in handles]}


def handles_of(vote: Vote) -> list[TxnHandle]:
    return [TxnHandle.from_dict(raw) for raw in vote.payload.get("handles", ())]
