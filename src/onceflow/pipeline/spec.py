"""What a pipeline is: its inputs, its transform and its outputs.

A ``PipelineSpec`` is plain data, importable everywhere (Airflow worker,
Spark driver, the CLI). Where it runs (warehouse, brokers, credentials) is a
``Deployment`` (see ``onceflow.config.deployment``), so the same spec runs on the
embedded stack and in production.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field, fields, replace, asdict
from typing import Any, Callable, Mapping

from onceflow.config.names import check_name
from onceflow.sources.kafka.columns import check_input_columns
from onceflow.config.settings import ConfigurationError
from onceflow.kafka.lifetime import DEFAULT_TRANSACTION_TIMEOUT_MS
from onceflow.core.plan import EXACTLY_ONCE, GUARANTEES
from onceflow.sinks import kinds, sink_kind, unknown_kind
from onceflow.core.planning.run_inputs import ONCEFLOW_PARAMS
from onceflow.kafka.acls import PipelineResources

# The built-in sink kinds (onceflow.sinks has what each does).
FILES = "files"
KAFKA = "kafka"
ICEBERG = "iceberg"
# How a pipeline's DAG runs map to batches (onceflow.core.planning.intervals says more).
OFFSETS = "offsets"  # each run takes the next offsets after the last committed batch, one run at a time
INTERVAL = "interval"  # each run's batch is the records of its data interval; backfills and runs in parallel
BATCHES = (OFFSETS, INTERVAL)
# The SinkSpec fields only some kinds read (``SinkKind.fields``); set on another kind, they are refused.
KIND_FIELDS = ("transaction_timeout_ms", "republish", "catalog", "partition_by")

@dataclass(frozen=True)
class SinkSpec:
    """One output. ``target`` is a path under the warehouse for ``files``
    (e.g. ``clickstream/page_minute_counts``), a topic for ``kafka``, a
    table identifier for ``iceberg`` (``namespace.table``); what a kind from
    another package makes of it, its documentation says."""

    name: str
    kind: str
    target: str
    splits: int = 2
    # Kafka sinks: the producers' transaction.timeout.ms. A pre-committed
    # transaction must outlive the gap between the Spark job and the commit
    # task; votes older than half of it are refused (aborted and re-run).
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    # The output for records the transform could not process (dead letters):
    # the UI and `onceflow status` count them per batch.
    dead_letter: bool = False
    # Kafka sinks of an interval pipeline: reprocessing a committed interval may
    # publish its records again (this topic's consumers deduplicate by key).
    # Without it, such a reprocessing is refused: records cannot be retracted.
    republish: bool = False
    # Iceberg sinks: the Airflow connection of the table's catalog (its extra:
    # pyiceberg catalog properties), and the partition spec of a table onceflow
    # creates: columns, each plain (identity) or in a transform, e.g.
    # ("day(window_start)", "bucket[16](page)").
    catalog: str | None = None
    partition_by: tuple[str, ...] = ()
    # The kind's own settings (JSON values), checked by the kind (``SinkKind.check_options``), e.g. a
    # kafka sink's {"partitioner": "murmur2"}. They travel to Spark with the spec: never a secret here.
    options: Mapping[str, Any] = field(default_factory=dict)
    # The delivery guarantee (``onceflow.sinks.api.GUARANTEES``): "exactly_once" (two-phase), or, where the
    # kind offers them, "at_least_once" (no transaction: replays may write copies, for consumers that
    # deduplicate) and "none" (a replay or retry never writes: records may be lost, never copied).
    guarantee: str = EXACTLY_ONCE

    def __post_init__(self) -> None:
        check_name("sink name", self.name)
        object.__setattr__(self, "partition_by", tuple(self.partition_by))
        if self.kind not in kinds():
            raise ConfigurationError(f"sink {self.name!r}: {unknown_kind(self.kind)}")
        if self.splits < 1:
            raise ConfigurationError(f"sink {self.name!r}: splits must be >= 1, got {self.splits}")
        if not self.target:
            raise ConfigurationError(f"sink {self.name!r}: target is empty: give a warehouse path or a topic")
        object.__setattr__(self, "options", dict(self.options))
        kind = sink_kind(self.kind)
        defaults = {f.name: f.default for f in fields(self)}
        stray = [name for name in KIND_FIELDS if getattr(self, name) != defaults[name] and name not in kind.fields]
        if stray:
            raise ConfigurationError(f"sink {self.name!r}: {', '.join(stray)} is not a setting of a {self.kind} sink "
                                     f"(it reads {', '.join(kind.fields) or 'none of ' + ', '.join(KIND_FIELDS)}): remove it")
        if self.guarantee not in kind.guarantees:
            offered = ", ".join(map(repr, kind.guarantees))
            raise ConfigurationError(f"sink {self.name!r}: guarantee {self.guarantee!r} is not one a {self.kind} sink "
                                     f"offers: use {offered}" + ("" if self.guarantee in GUARANTEES else
                                                                  f" ({', '.join(GUARANTEES)} exist)"))
        kind.check_options(self)


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    topics: tuple[str, ...]
    # "package.module:function": takes (input DataFrame, batch id) and
    # returns {sink name: DataFrame}. Resolved in the Spark driver.
    transform: str
    sinks: tuple[SinkSpec, ...]
    start: str | int = "earliest"
    max_records_per_partition: int | None = 100_000
    schedule: str | None = "* * * * *"
    # The consumer group whose offsets mirror the committed ranges (lag tools).
    consumer_group: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    # The transform's run parameters: name -> an Airflow Param's keyword arguments (default,
    # type, description, minimum, enum...). The DAG declares them; each run's values are
    # recorded in its plan and passed to the transform as a third argument.
    run_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The input columns the transform uses (None: all of INPUT_COLUMNS). Each
    # one left out is not read from Kafka at all; `headers` costs the most.
    input_columns: tuple[str, ...] | None = None
    # OFFSETS or INTERVAL. Interval pipelines need a schedule with data intervals.
    batches: str = OFFSETS
    # Interval pipelines: how long after an interval's end a partition with no
    # record at or after it stops holding the interval open (an idle partition).
    interval_grace_s: int = 300
    # Interval pipelines: at most this many batches in flight at once; each
    # takes one slot of this many (with Kafka outputs at most TXN_ID_POOL: onceflow.sinks.kafka.ids).
    batches_in_flight: int = 16
    # Small batches in fewer splits: each output is written in one split per this many of the batch's
    # input records, at most its sink's ``splits`` (a 1,000-record batch: one Spark task, transaction and
    # file per output instead of ``splits``). None: always the sinks' ``splits``. The plan records the result.
    records_per_split: int | None = None

    def __post_init__(self) -> None:
        check_name("pipeline name", self.name)
        if self.batches not in BATCHES:
            raise ConfigurationError(
                f"pipeline {self.name!r}: batches={self.batches!r} is not valid: use {OFFSETS!r} (the next offsets, "
                f"one run at a time) or {INTERVAL!r} (each run reads its data interval)"
            )
        if self.interval_grace_s < 0:
            raise ConfigurationError(f"pipeline {self.name!r}: interval_grace_s must be >= 0, got {self.interval_grace_s}")
        if self.batches_in_flight < 1:
            raise ConfigurationError(f"pipeline {self.name!r}: batches_in_flight must be >= 1, got {self.batches_in_flight}")
        if self.records_per_split is not None and self.records_per_split < 1:
            raise ConfigurationError(f"pipeline {self.name!r}: records_per_split must be >= 1, or None for always the "
                                     f"sinks' splits, got {self.records_per_split}")
        if self.batches == INTERVAL and self.max_records_per_partition is not None:
            raise ConfigurationError(
                f"pipeline {self.name!r}: max_records_per_partition={self.max_records_per_partition} does not apply to "
                "batches='interval' (a batch is its interval, whatever its size): set max_records_per_partition=None"
            )
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(self, "sinks", tuple(self.sinks))
        if self.input_columns is not None:
            object.__setattr__(
                self, "input_columns", check_input_columns(self.input_columns, f"pipeline {self.name!r}: input_columns")
            )
        if not self.topics:
            raise ConfigurationError(f"pipeline {self.name!r}: topics is empty: name at least one input topic")
        if not self.sinks:
            raise ConfigurationError(f"pipeline {self.name!r}: sinks is empty: a pipeline needs an output")
        names = [s.name for s in self.sinks]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"pipeline {self.name!r}: sink names must be unique, got {names}")
        self._check_run_params()
        if ":" not in self.transform:
            raise ConfigurationError(
                f"pipeline {self.name!r}: transform {self.transform!r} must be 'package.module:function'"
            )

    def _check_run_params(self) -> None:
        for name, schema in self.run_params.items():
            if not isinstance(name, str) or not name.isidentifier() or name in ONCEFLOW_PARAMS:
                raise ConfigurationError(
                    f"pipeline {self.name!r}: run_params name {name!r} is not valid: use a Python identifier other "
                    f"than onceflow's own run parameters ({', '.join(sorted(ONCEFLOW_PARAMS))})"
                )
            if not isinstance(schema, Mapping):
                raise ConfigurationError(
                    f"pipeline {self.name!r}: run_params[{name!r}] must be an Airflow Param's keyword arguments, e.g. "
                    '{"default": 10, "type": "integer", "minimum": 1}'
                )

    def apply_transform(self, records, plan) -> Mapping[str, Any]:
        """``transform(records, batch id)``, or with the plan's transform parameters as a
        third argument when the spec declares ``run_params`` (Spark driver)."""
        function = self.transform_function()
        if self.run_params:
            return function(records, plan.batch_id, dict(plan.transform_params))
        return function(records, plan.batch_id)

    @property
    def group_id(self) -> str:
        return self.consumer_group or f"onceflow-{self.name}"

    def kafka_resources(self):
        """The Kafka resources this pipeline's principals are granted ACLs on (``onceflow.kafka.acls``)."""
        outputs = tuple(topic for s in self.sinks for topic in sink_kind(s.kind).kafka_topics(s))
        return PipelineResources(self.name, tuple(self.topics), outputs, self.group_id)

    def sink(self, name: str) -> SinkSpec:
        for sink in self.sinks:
            if sink.name == name:
                return sink
        raise KeyError(f"pipeline {self.name!r} has no sink {name!r}")

    def without_params(self) -> "PipelineSpec":
        """This spec without its free-form ``params``, which may hold a token: what may be shown or
        stored where others read (the plan task's doc, a trigger's kwargs, a command line)."""
        return replace(self, params={})

    def to_json(self) -> str:
        """Plain data: travels to Spark workers as a data source option."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "PipelineSpec":
        raw = json.loads(text)
        raw["sinks"] = tuple(SinkSpec(**s) for s in raw["sinks"])
        return cls(**raw)

    def transform_function(self) -> Callable:
        module, _, attr = self.transform.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(
                f"pipeline {self.name!r}: cannot import transform {self.transform!r} ({exc}); "
                "check the module is on the Spark driver's PYTHONPATH"
            ) from None
