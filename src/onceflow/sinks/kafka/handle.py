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
from onceflow.sinks.votes import PayloadFormat, UnreadablePayload

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
    # The headers' format (``headers.FORMATS``); named in every handle of a version 2 payload
    # (``handles_name_their_formats``), 0 only in a handle not read from one.
    record_format: int = 0
    # The transaction protocol version the producer began on (``txn_protocol``); named like record_format.
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
        return self.transactional_id, self.producer_id, self.epoch, self.transaction_version

    def where(self) -> str:
        """The split as every answer about it names it."""
        return f"batch {self.batch_id} split {self.split} ({self.transactional_id}) on {self.topic}"

    def to_dict(self) -> dict[str, Any]:
        raw = asdict(self)
        raw["partitions"] = {str(p): asdict(w) for p, w in self.partitions.items()}
        return raw

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "TxnHandle":
        unknown = sorted(set(raw) - {f.name for f in fields(cls)})
        if unknown:  # a newer onceflow's fields come with a newer payload version: these are none of those
            raise UnreadablePayload(f"a kafka vote's handle has fields this onceflow does not know ({', '.join(unknown)}) "
                                    f"in a payload of version {KAFKA_PAYLOAD.version}: the vote was changed")
        values = dict(raw)
        values["partitions"] = {int(p): PartitionWrite(**w) for p, w in raw.get("partitions", {}).items()}
        return cls(**values)


def handle_headers(h: TxnHandle) -> list[tuple[str, bytes]]:
    """The headers the split of ``h`` put on its records (and a repair of it puts first), in the format
    its handle names."""
    return record_headers(h.batch_id, h.split, h.transactional_id, h.record_format)


def handles_name_their_formats(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: every handle names its record format and transaction protocol version. Version 1
    handles from before those fields left them out (or 0): such a split's producer spoke transaction
    protocol v1, and it wrote record format 2 if its handle has a staged_sha256 (the onceflow.txn header
    came with that field), else format 1."""
    def named(handle: dict[str, Any]) -> dict[str, Any]:
        return {**handle, "record_format": handle.get("record_format") or (2 if handle.get("staged_sha256") else 1),
                "transaction_version": handle.get("transaction_version") or 1}

    return {**payload, "handles": [named(h) for h in payload.get("handles", ())]} if "handles" in payload else payload


# Version 2: each handle names its record format and transaction protocol version.
KAFKA_PAYLOAD = PayloadFormat("kafka", 2, {1: handles_name_their_formats})


def vote_payload(handles: Iterable[TxnHandle]) -> dict[str, Any]:
    """The Kafka sink's vote payload (JSON-serialisable), with its version."""
    return KAFKA_PAYLOAD.write({"handles": [h.to_dict() for h in handles]})


def handles_of(vote: Vote) -> list[TxnHandle]:
    """The handles of a Kafka vote of any version this onceflow reads (``KAFKA_PAYLOAD``)."""
    return [TxnHandle.from_dict(raw) for raw in KAFKA_PAYLOAD.read(vote.payload).get("handles", ())]
