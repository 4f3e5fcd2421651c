"""What a pipeline tells both planners: its topics, outputs, start position, per-run cap and split size."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from onceflow.core.plan import SinkPlan
from onceflow.config.settings import ConfigurationError


@dataclass(frozen=True)
class StartPosition:
    """Where a partition without committed batches starts."""

    kind: str  # "earliest" | "latest" | "timestamp"
    timestamp_ms: int | None = None

    @classmethod
    def parse(cls, value: "StartPosition | str | int") -> "StartPosition":
        if isinstance(value, StartPosition):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return cls("timestamp", value)
        text = str(value).strip().lower()
        if text in ("earliest", "latest"):
            return cls(text)
        if text.startswith("timestamp:") and text[10:].isdigit():
            return cls("timestamp", int(text[10:]))
        raise ConfigurationError(
            f"start_position {value!r} is not valid: use 'earliest', 'latest', or a timestamp in epoch "
            "milliseconds (an int or 'timestamp:<ms>')"
        )

    def __str__(self) -> str:
        return f"timestamp:{self.timestamp_ms}" if self.kind == "timestamp" else self.kind


def no_transactional_ids(pipeline: str, sink: SinkPlan, batch_seq: int) -> tuple[str, ...]:
    """For sinks that write inside no transaction: nothing to fence."""
    return ()


@dataclass(frozen=True)
class PlanConfig:
    topics: tuple[str, ...]
    sinks: tuple[SinkPlan, ...]
    start: StartPosition = StartPosition("earliest")
    max_records_per_partition: int | None = None
    # A batch writes each output in one split per this many of its input records, at most the sink's
    # splits (None: always the sink's splits; the pipeline's spec checks it). See ``fitted_splits``.
    records_per_split: int | None = None
    # (pipeline, sink plan, batch seq) -> the transactional ids of the sink's splits in that
    # batch, derived so that rollback can fence them even when a job died before voting.
    # The sink's kind answers (onceflow.sinks); planning never asks which kind it is.
    transactional_ids: Callable[..., tuple[str, ...]] = no_transactional_ids
    # The transform's run parameters (``RunInputs.transform``): recorded in each plan, read by the transform only.
    transform_params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(self, "sinks", tuple(self.sinks))
        object.__setattr__(self, "start", StartPosition.parse(self.start))
        if not self.topics:
            raise ConfigurationError("topics is empty: name at least one input topic")
        if self.max_records_per_partition is not None and self.max_records_per_partition < 1:
            raise ConfigurationError(
                f"max_records_per_partition must be >= 1 or None (no limit), got {self.max_records_per_partition}"
            )
        names = [s.name for s in self.sinks]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"sink names must be unique, got {names}")


def fitted_splits(splits: int, records: int | None, records_per_split: int | None) -> int:
    """The splits a batch of ``records`` input records writes an output in: one per ``records_per_split``,
    at least one, at most the sink's ``splits``. Each split is a Spark task with its own transaction or
    file, whose fixed cost dominates a small batch; the plan records the result, so retries reuse it."""
    if records is None or records_per_split is None:
        return splits
    return max(1, min(splits, -(-records // records_per_split)))


def with_ids(pipeline: str, config: PlanConfig, seq: int, records: int | None = None) -> tuple[SinkPlan, ...]:
    """The config's sinks, their splits fitted to a batch of ``records`` input records, each with the
    transactional ids its splits may use in batch ``seq``. ``records`` None: every split of the sink,
    so every id any batch ``seq`` may use."""
    fitted = (replace(s, splits=fitted_splits(s.splits, records, config.records_per_split)) for s in config.sinks)
    return tuple(replace(s, transactional_ids=tuple(config.transactional_ids(pipeline, s, seq))) for s in fitted)
