"""Sink kinds: what each kind of output does at each step of a batch.

A kind is one module implementing ``SinkKind``; a ``SinkSpec`` names it by
its string. ``sink_kind`` looks the string up here, or in the
``onceflow.sinks`` entry point group of another package, and imports the
module on first use (DAG parsing imports no sink's client library). Nothing
else in onceflow branches on a sink's kind: a new kind is one new module and
one line below.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
import importlib
from importlib.metadata import entry_points
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from ..settings import ConfigurationError

if TYPE_CHECKING:
    from ..deployment import Deployment
    from ..protocol.participant import Participant, Vote
    from ..protocol.plan import SinkPlan
    from ..spec import PipelineSpec, SinkSpec

ENTRY_POINT_GROUP = "onceflow.sinks"
BUILT_IN: dict[str, str] = {
    "files": "onceflow.sinks.files:FILES",
    "kafka": "onceflow.sinks.kafka:KAFKA",
    "iceberg": "onceflow.sinks.iceberg:ICEBERG",
}


@dataclass(frozen=True)
class AuditScope:
    """Which batches an audit compares, and what it may rely on to find their rows."""

    # The audited batches' ids; None: every batch (rows of batches never committed are then found too).
    batches: frozenset[str] | None
    # The replayed output's schema (a Spark StructType): the columns to read back.
    schema: Any
    # The committed batches' statuses by batch id: for an output that cannot tell its committed rows
    # apart by its own marks (a Kafka broker whose profile shows aborted records), the decided votes say.
    committed: Mapping[str, Any]

    def covers(self, batch_id: str) -> bool:
        return self.batches is None or batch_id in self.batches


@dataclass(frozen=True)
class OpenTransaction:
    """A pre-committed transaction: the broker aborts it ``timeout_ms`` after ``started_ms``."""

    transactional_id: str
    split: int
    started_ms: int
    timeout_ms: int

    @property
    def deadline_ms(self) -> int:
        return self.started_ms + self.timeout_ms

    def used(self, now_ms: int) -> float:
        """The fraction of its timeout already gone."""
        return max(0.0, (now_ms - self.started_ms) / self.timeout_ms)


class SinkKind(Protocol):
    """One kind of output. Where each call runs is in brackets."""

    name: str
    # The module of the Spark data source that pre-commits this kind; its
    # ``register(spark)`` runs before the batch's outputs are written.
    data_source: str

    def location(self, sink: SinkSpec, warehouse: str) -> str:
        """Where the output lives: a path under the warehouse, a topic, a table [anywhere]."""

    def asset_uri(self, sink: SinkSpec, warehouse: str) -> str:
        """The URI of the output's Airflow Asset [DAG parsing]."""

    def transactional_ids(self, pipeline: str, sink: SinkPlan, batch_seq: int) -> tuple[str, ...]:
        """The ids of the transactions the sink's splits may open in batch ``batch_seq``, derived so
        that a rollback can fence them even when the job died before voting, and never shared with
        another batch (a zombie of one batch cannot fence another's); () if none [planning]."""

    def vote_lifetime(self, sink: SinkSpec) -> timedelta | None:
        """How long a pre-committed output stays committable (None: no bound) [DAG parsing:
        the spark task's execution_timeout]."""

    def open_transactions(self, sink: SinkSpec, vote: Vote) -> list[OpenTransaction]:
        """The transactions ``vote`` holds open until the decision is applied, each
        with the time it began and its timeout; [] for a kind without any [UI, status]."""

    def check(self, sink: SinkSpec, deployment: Deployment) -> None:
        """Fail fast, naming the setting and the fix, on a deployment this output
        cannot work with [plan task, before a batch is planned]."""

    def reprocess(self, sink: SinkSpec) -> str | None:
        """What a batch that reprocesses a committed interval does to this output:
        ``"replaced"`` (the earlier batch's output is removed in the same commit) or
        ``"republished"`` (published again beside it); None when it can do neither
        safely, so reprocessing is refused [plan task of an interval pipeline]."""

    def participant(self, pipeline: PipelineSpec, sink: SinkSpec, deployment: Deployment) -> Participant:
        """The participant that verifies, commits and aborts the sink's batches [Airflow worker, Spark driver]."""

    def pre_commit(self, frame: Any, sink: SinkSpec, sink_plan: SinkPlan, deployment: Deployment,
                   job_options: Mapping[str, str]) -> None:
        """Write ``frame`` so that nothing is visible, and vote [Spark driver; the writes run on executors].
        ``job_options`` (pipeline spec, deployment, batch, attempt) go to the data source unchanged."""

    def committed_output(self, spark: Any, sink: SinkSpec, pipeline: PipelineSpec, deployment: Deployment,
                         scope: AuditScope) -> CommittedOutput:
        """What any reader of the output sees of the batches in ``scope``, each row with the batch that
        wrote it, told apart by the output's own marks, never by the ledger's votes (but see
        ``AuditScope.committed``) [``onceflow audit``: Spark driver; the reads run on executors]."""


@functools.cache  # every SinkSpec asks (kinds()); the installed packages do not change under a process
def _table() -> dict[str, str]:
    table = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return {**table, **BUILT_IN}  # a package cannot replace a built-in kind


def kinds() -> tuple[str, ...]:
    return tuple(sorted(_table()))


@functools.cache
def sink_kind(name: str) -> SinkKind:
    location = _table().get(name)
    if location is None:
        raise ConfigurationError(f"sink kind {name!r} is not known: use one of {', '.join(kinds())}")
    module, _, attribute = location.partition(":")
    return getattr(importlib.import_module(module), attribute)


def reprocessing(spec: PipelineSpec) -> dict[str, str]:
    """What reprocessing a committed interval does to each output
    (``SinkKind.reprocess``); ``ReprocessRefused`` names every output that
    can neither retract its earlier batch nor safely publish it again."""
    from ..protocol.intervals import ReprocessRefused

    how = {s.name: sink_kind(s.kind).reprocess(s) for s in spec.sinks}
    refused = [f"{s.name} ({s.kind}: {s.target})" for s in spec.sinks if how[s.name] is None]
    if refused:
        raise ReprocessRefused(
            f"pipeline {spec.name!r}: a committed interval cannot be reprocessed, because {', '.join(refused)} "
            "cannot take back what the interval's batch published there. Declare SinkSpec(republish=True) on such "
            "an output if its consumers deduplicate by key (the records are then published again), or do not "
            "replace committed intervals. Nothing was read."
        )
    return how


def open_transactions_of(spec: PipelineSpec, votes: Mapping[str, Vote]) -> list[tuple[str, OpenTransaction]]:
    """(output, transaction) for every transaction the votes hold open, output by output."""
    return [
        (name, txn)
        for name, vote in sorted(votes.items())
        for txn in sink_kind(spec.sink(name).kind).open_transactions(spec.sink(name), vote)
    ]


# The Spark data source that reads committed Parquet back for the audit (onceflow.spark.committed_parquet).
COMMITTED_PARQUET = "onceflow_committed_parquet"


def committed_parquet(spark, files: list[list[str]], schema, options: Mapping[str, str]):
    """``files`` ([uri, batch id], ...) read back as ``schema`` plus a ``batch`` column (an audit's read)."""
    from pyspark.sql.types import StringType, StructField, StructType

    with_batch = StructType([*schema.fields, StructField("batch", StringType())])
    return (spark.read.format(COMMITTED_PARQUET).schema(with_batch).option("files", json.dumps(files))
            .options(**options).load())


@dataclass(frozen=True)
class CommittedOutput:
    """What readers of an output see of the audited batches (``SinkKind.committed_output``).

    ``frame``: a Spark DataFrame of the output's rows with column ``batch`` (the batch id
    that wrote each row, by the output's own marks: its directory, snapshot, record
    header), None when nothing is there. ``findings``: what is wrong with the output
    apart from its rows (a manifest naming a file that is gone, a file no manifest
    lists); each one fails the audit. ``reading``: how the rows were told apart.
    ``set_aside``: rows readers see that the output cannot attribute to a committed
    batch without the votes (``AuditScope.committed``), left out of the comparison.
    """

    frame: Any
    findings: tuple[str, ...] = ()
    reading: str = ""
    set_aside: int = 0
