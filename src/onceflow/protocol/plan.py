"""The plan of a batch: what it reads and which outputs it may produce.

Written once to the ledger by the plan task (Airflow worker) and immutable
afterwards (I6): retries, re-runs and backfills read it back. Spark jobs read
it to know their input ranges and their transactional ids; the rollback task
reads it to fence every transactional id the batch could have used, even for
splits that never voted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .batch_id import BatchId


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records ``[start, end)`` of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"invalid offset range {self.topic}[{self.partition}] [{self.start}, {self.end})")

    @property
    def size(self) -> int:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "OffsetRange":
        return cls(str(raw["topic"]), int(raw["partition"]), int(raw["start"]), int(raw["end"]))


@dataclass(frozen=True)
class SinkPlan:
    """One output of the batch.

    ``kind`` is a registered sink kind (``onceflow.sinks``). For a Kafka sink,
    ``transactional_ids[i]`` is the only id split ``i`` may use; ids are
    derived from (pipeline, sink, split), never random, so that abort can
    fence them all.
    """

    name: str
    kind: str
    splits: int
    transactional_ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "splits": self.splits, "transactional_ids": list(self.transactional_ids)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "SinkPlan":
        return cls(str(raw["name"]), str(raw["kind"]), int(raw["splits"]), tuple(raw.get("transactional_ids", ())))


@dataclass(frozen=True)
class Plan:
    pipeline: str
    batch_seq: int
    ranges: tuple[OffsetRange, ...]
    sinks: tuple[SinkPlan, ...] = ()
    created_at_ms: int = 0
    # The aborted batch whose ranges this one re-reads (I6), if any.
    replay_of: int | None = None
    # Free-form run parameters (for example max records per partition).
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def batch_id(self) -> str:
        return str(BatchId(self.batch_seq))

    @property
    def records(self) -> int:
        return sum(r.size for r in self.ranges)

    def sink(self, name: str) -> SinkPlan:
        for sink in self.sinks:
            if sink.name == name:
                return sink
        raise KeyError(f"batch {self.batch_id} of {self.pipeline} has no sink {name!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "batch_seq": self.batch_seq,
            "ranges": [r.to_dict() for r in self.ranges],
            "sinks": [s.to_dict() for s in self.sinks],
            "created_at_ms": self.created_at_ms,
            "replay_of": self.replay_of,
            "params": dict(self.params),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Plan":
        return cls(
            pipeline=str(raw["pipeline"]),
            batch_seq=int(raw["batch_seq"]),
            ranges=tuple(OffsetRange.from_dict(r) for r in raw["ranges"]),
            sinks=tuple(SinkPlan.from_dict(s) for s in raw.get("sinks", ())),
            created_at_ms=int(raw.get("created_at_ms", 0)),
            replay_of=raw.get("replay_of"),
            params=dict(raw.get("params", {})),
        )
