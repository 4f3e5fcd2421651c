"""The plan of a batch: what it reads and which outputs it may produce.

Written once to the ledger by the plan task (Airflow worker) and immutable
afterwards (I6): retries, re-runs and backfills read it back. Spark jobs read
it to know their input ranges and their transactional ids; the rollback task
reads it to fence every transactional id the batch could have used, even for
splits that never voted.

Every protocol fact of a plan (its interval, slot, the batch it replaces, its
run id...) is a typed field that only the planner writes. Run parameters
never reach them: the transform's own parameters travel apart, in
``transform_params``, and reach only the transform (docs/protocol.md, "Run
parameters"). Plans written before that (ledger plan format 1) kept facts and
run parameters in one dictionary that a run's conf could write;
``Plan.from_dict`` believes only what the planner of that time could have
written, and lists the rest in ``Plan.disbelieved``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from onceflow.core.batch_id import BatchId


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


# Delivery guarantees of an output (``SinkSpec.guarantee``), after Flink's DeliveryGuarantee.
EXACTLY_ONCE = "exactly_once"  # two-phase: written invisibly by the job, made visible by the commit task
AT_LEAST_ONCE = "at_least_once"  # written visibly by the job; a replay or a retried attempt writes its records again
NO_GUARANTEE = "none"  # written visibly by the job's first attempt only: a replay or a retry never writes it again
GUARANTEES = {
    EXACTLY_ONCE: "every record once: the job pre-commits, the commit task makes the batch visible",
    AT_LEAST_ONCE: "every record at least once: the job writes and flushes; a replay or retry may write copies",
    NO_GUARANTEE: "every record at most once: only a batch's first attempt writes; a replay or retry writes nothing",
}


# Batches ``seq`` and ``seq - TXN_ID_POOL`` may share transactional ids, so a pipeline's ids at the broker
# are bounded by its shape, not by its batches in the broker's expiration (docs/scaling.md).
TXN_ID_POOL = 16


@dataclass(frozen=True)
class SinkPlan:
    """One output of the batch.

    ``kind`` is a registered sink kind (``onceflow.sinks``). For a Kafka sink,
    ``transactional_ids[i]`` is the only id split ``i`` may use; ids are
    derived from (pipeline, sink, split, batch), never random, so that abort can
    fence them all. A kind may give batch ``seq`` the ids of batch
    ``seq - TXN_ID_POOL``, never of a nearer one: the planners plan ``seq``
    only once that batch is finished (I5).
    """

    name: str
    kind: str
    splits: int
    transactional_ids: tuple[str, ...] = ()
    # The output's delivery guarantee (``GUARANTEES``), fixed for the batch when it is planned.
    guarantee: str = EXACTLY_ONCE

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "splits": self.splits, "transactional_ids": list(self.transactional_ids),
                "guarantee": self.guarantee}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "SinkPlan":
        guarantee = str(raw.get("guarantee", EXACTLY_ONCE))  # plans from before guarantees were all exactly once
        if guarantee not in GUARANTEES:
            raise ValueError(f"sink {raw['name']!r}: the plan's guarantee {guarantee!r} is not one of {', '.join(GUARANTEES)}")
        return cls(str(raw["name"]), str(raw["kind"]), int(raw["splits"]), tuple(raw.get("transactional_ids", ())),
                   guarantee)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, order=True)
class Interval:
    """A data interval ``[start_ms, end_ms)``, epoch milliseconds."""

    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        if not all(type(v) is int for v in (self.start_ms, self.end_ms)) or not 0 <= self.start_ms < self.end_ms:
            raise ValueError(f"a data interval is [start_ms, end_ms) with 0 <= start_ms < end_ms, got "
                             f"[{self.start_ms!r}, {self.end_ms!r})")

    def __str__(self) -> str:
        return f"{iso(self.start_ms)}/{iso(self.end_ms)}"

    @property
    def key(self) -> str:
        """Its ledger path segment; sorts by start."""
        return f"{self.start_ms:015d}-{self.end_ms:015d}"

    def to_dict(self) -> dict[str, int]:
        return {"start_ms": self.start_ms, "end_ms": self.end_ms}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Interval":
        return cls(int(raw["start_ms"]), int(raw["end_ms"]))


@dataclass(frozen=True)
class Replacement:
    """A reprocessed interval: this batch replaces committed batch ``batch_seq`` of
    the same interval, and ``outputs`` says what that does to each output
    (``SinkKind.reprocess``). Written by the interval planner only, when the run
    asked to reprocess (``replace_committed``)."""

    batch_seq: int
    outputs: Mapping[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"batch_seq": self.batch_seq, "outputs": dict(self.outputs)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Replacement":
        return cls(_positive(raw["batch_seq"]), _str_map(raw["outputs"]))


def _positive(value: Any) -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"expected an integer >= 1, got {value!r}")
    return value


def _natural(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"expected an integer >= 0, got {value!r}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"expected a mapping of strings to strings, got {value!r}")
    return dict(value)


# Each protocol fact of a plan: how its stored value is read back (a value
# that does not read is a malformed plan, never a default).
FACTS: dict[str, Callable[[Any], Any]] = {
    "run_id": _text,
    "interval": lambda raw: Interval.from_dict(raw if isinstance(raw, Mapping) else {}),
    "slot": _natural,
    "batches_in_flight": _positive,
    "replaces": Replacement.from_dict,
    "topic_ids": _str_map,
    "start_position": _text,
    "max_records_per_partition": _positive,
    "replanned": _text,
    "intervention": _text,
    "backlog": _natural,
    "committed_before": _natural,
}


@dataclass(frozen=True)
class Plan:
    pipeline: str
    batch_seq: int
    ranges: tuple[OffsetRange, ...]
    sinks: tuple[SinkPlan, ...] = ()
    created_at_ms: int = 0
    # The aborted batch whose ranges this one re-reads (I6), if any.
    replay_of: int | None = None
    # -- protocol facts: written by the planner only (FACTS reads them back) --
    run_id: str | None = None  # the Airflow run that planned the batch
    interval: Interval | None = None  # an interval pipeline's data interval
    slot: int | None = None  # an interval batch's slot of transactional ids
    batches_in_flight: int | None = None  # the pool of slots when it was planned
    replaces: Replacement | None = None  # a reprocessed interval: the committed batch it replaces
    topic_ids: Mapping[str, str] = field(default_factory=dict)  # input topics' ids (a recreated topic is refused)
    start_position: str | None = None  # where a topic new to the pipeline starts
    max_records_per_partition: int | None = None  # the cap the batch was planned with
    replanned: str | None = None  # why a replay is smaller than the batch it replays
    intervention: str | None = None  # the operator's split or skip this plan follows
    backlog: int | None = None  # input lag when planned
    # The newest COMMITTED batch below this one (0: none), fixed when an offsets batch is planned:
    # its predecessor is finished by then. None: an interval batch, or not known (a plan before this fact).
    committed_before: int | None = None
    # -- the transform's own run parameters: passed to the transform, never read by the protocol --
    transform_params: Mapping[str, Any] = field(default_factory=dict)
    # A plan of ledger format 1: the keys of its parameters that were not believed, and why.
    disbelieved: Mapping[str, str] = field(default_factory=dict)

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

    def facts(self) -> dict[str, Any]:
        """The protocol facts that are set, as stored."""
        out = {}
        for name in FACTS:
            value = getattr(self, name)
            if value is None or value == {}:
                continue
            out[name] = value.to_dict() if hasattr(value, "to_dict") else (dict(value) if isinstance(value, Mapping) else value)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "batch_seq": self.batch_seq,
            "ranges": [r.to_dict() for r in self.ranges],
            "sinks": [s.to_dict() for s in self.sinks],
            "created_at_ms": self.created_at_ms,
            "replay_of": self.replay_of,
            "facts": self.facts(),
            "transform_params": dict(self.transform_params),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Plan":
        """A stored plan. ``facts`` (this format) are read strictly: a malformed one
        raises ``ValueError`` naming it. ``params`` (format 1) are read as
        ``legacy_facts`` says."""
        base = dict(
            pipeline=str(raw["pipeline"]),
            batch_seq=int(raw["batch_seq"]),
            ranges=tuple(OffsetRange.from_dict(r) for r in raw["ranges"]),
            sinks=tuple(SinkPlan.from_dict(s) for s in raw.get("sinks", ())),
            created_at_ms=int(raw.get("created_at_ms", 0)),
            replay_of=raw.get("replay_of"),
        )
        if "facts" in raw:
            facts = {}
            for name, value in dict(raw["facts"]).items():
                if name not in FACTS:
                    raise ValueError(f"plan of batch {BatchId(base['batch_seq'])} has an unknown fact {name!r}: "
                                     "it was written by a newer onceflow")
                try:
                    facts[name] = FACTS[name](value)
                except (ValueError, TypeError, KeyError) as exc:
                    raise ValueError(f"plan of batch {BatchId(base['batch_seq'])}: fact {name!r} is malformed "
                                     f"({exc})") from None
            return cls(**base, **facts, transform_params=dict(raw.get("transform_params") or {}))
        facts, disbelieved = legacy_facts(base["batch_seq"], dict(raw.get("params") or {}))
        return cls(**base, **facts, disbelieved=disbelieved)


# Keys the planner of ledger format 1 wrote itself, per kind of pipeline; any
# other key of its params came from a run's conf.
_LEGACY_OFFSETS = ("run_id", "topic_ids", "start_position", "max_records_per_partition", "replanned", "intervention",
                   "backlog")
_LEGACY_INTERVAL = ("run_id", "interval", "slot", "batches_in_flight", "replaces", "backlog")


def legacy_facts(seq: int, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The protocol facts of a format-1 plan's ``params``, and the keys not believed.

    That planner merged the run's conf into the same dictionary, so a key is
    believed only where it could have written it: an interval plan is one
    whose ``interval``, ``slot`` and ``batches_in_flight`` read and agree
    (``slot == seq % batches_in_flight``, as it always wrote them); only an
    interval plan has a replacement (``replaces`` with ``reprocessed``). A
    value that does not read is not believed either. The commit still checks a
    believed replacement against the batch it names (``replacement_refusal``).
    """
    facts: dict[str, Any] = {}
    disbelieved: dict[str, str] = {}

    def read(name: str) -> Any:
        try:
            return FACTS[name](params[name])
        except (ValueError, TypeError, KeyError) as exc:
            disbelieved[name] = f"malformed ({exc})"
            return None

    raw = dict(params)
    if "replaces" in raw:  # format 1 kept the replaced batch and what replacing did in two keys
        raw["replaces"] = {"batch_seq": raw.get("replaces"), "outputs": raw.pop("reprocessed", None)}
        params = raw
    interval_plan = all(k in params for k in ("interval", "slot", "batches_in_flight"))
    if interval_plan:
        interval, slot, pool = read("interval"), read("slot"), read("batches_in_flight")
        interval_plan = None not in (interval, slot, pool) and slot == seq % pool
        if interval_plan:
            facts.update(interval=interval, slot=slot, batches_in_flight=pool)
    believed = _LEGACY_INTERVAL if interval_plan else _LEGACY_OFFSETS
    for name, value in params.items():
        if name in facts or name in disbelieved:
            continue
        if name not in believed:
            disbelieved[name] = ("a run parameter of the old plan format, not a fact its planner wrote for this kind "
                                 "of pipeline: ignored")
            continue
        if (fact := read(name)) is not None:
            facts[name] = fact
    return facts, disbelieved

