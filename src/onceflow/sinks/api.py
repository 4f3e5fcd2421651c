"""The sink contract: what a kind of output implements to take part in a batch.

This module is the one a sink author imports. A kind is two halves, after
Flink's ``TwoPhaseCommitSinkFunction`` split where an Airflow batch splits::

    Flink                     onceflow                                  runs in
    beginTransaction+invoke   SinkKind.pre_commit(frame, ...)            Spark driver; writes on executors
    preCommit                 the data source's commit -> record_vote    a Spark Python worker
    (checked before commit)   Participant.verify(vote)    -> Result      Airflow worker, before the decision
    commit                    Participant.commit(vote)    -> Result      Airflow worker: commit task, recovery
    abort                     Participant.abort(plan, votes) -> Result   Airflow worker: rollback task, recovery
    (none)                    Participant.after_commit(plan)             Airflow worker, once COMMITTED

Every commit-side call is idempotent and may run again from another process
after any crash; it answers with an ``Outcome`` (done, already done, retry
later, failed), as Flink Sink V2's ``Committer`` answers a ``CommitRequest``.
A kind derives, from the plan alone, the ids of whatever an attempt may open
(``SinkKind.transactional_ids``), so that ``abort`` fences an attempt that died
before it voted. The optional steps are declared, not discovered:
``Participant.after_commit`` (a no-op unless overridden) and
``SinkKind.reprocess``. docs/writing-a-sink.md walks through a kind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Mapping, Protocol

# The coordinator's view of a participant, its votes and outcomes (the protocol core owns them).
from onceflow.core.batch_id import BatchId
from onceflow.core.participant import Outcome, Participant, Result, Vote
from onceflow.core.plan import AT_LEAST_ONCE, EXACTLY_ONCE, GUARANTEES, NO_GUARANTEE, Plan, SinkPlan
from onceflow.config.settings import ConfigurationError
from onceflow.sinks.votes import record_vote
from onceflow.sinks.writer_options import job_fault_options

if TYPE_CHECKING:
    from onceflow.config.deployment import Deployment
    from onceflow.pipeline.spec import PipelineSpec, SinkSpec

__all__ = [
    "AT_LEAST_ONCE", "AuditScope", "BatchId", "CommittedOutput", "ConfigurationError", "EXACTLY_ONCE", "GUARANTEES",
    "JOB_OPTIONS", "NO_GUARANTEE", "OpenTransaction", "Outcome", "Participant", "Plan", "Result", "SinkKind", "SinkPlan",
    "Vote", "committed_parquet", "record_vote", "refuse_options",
]

# What the batch job passes a kind's ``pre_commit`` as ``job_options`` (``job_options()`` makes them), every
# value a string; the data source gets them unchanged (``record_vote`` reads pipeline and deployment).
JOB_OPTIONS = {
    "pipeline": "the pipeline's name",
    "deployment": "where the pipeline runs, serialized: record_vote finds the ledger through it",
    "sink": "the output's name (SinkSpec.name)",
    "batch_seq": "the batch's number",
    "planned_at_ms": "when the batch was planned (Plan.created_at_ms), in ms since the epoch",
    "attempt": "the batch's attempt, from 1; a retried Spark task keeps it (TaskContext tells task attempts apart)",
    "replaces": "only for a batch that reprocesses a committed interval: the number of the batch it replaces",
    "faults": "only when a run arms fault points on a Spark Connect server: the points, for its Python workers",
}
OPTIONAL_JOB_OPTIONS = ("replaces", "faults")


@dataclass(frozen=True)
class OpenTransaction:
    """Something a vote holds open until the decision is applied (a Kafka transaction, a prepared
    database transaction), with the time it began and how long the system keeps it; the UI and
    ``onceflow status`` show how much of that is gone."""

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


class SinkKind(Protocol):
    """One kind of output. Where each call runs is in brackets. Subclass it: the optional members
    have the defaults their docstrings give; ``REQUIRED`` are the ones a kind must define."""

    name: str
    # The module of the Spark data source that pre-commits this kind; its
    # ``register(spark)`` runs before the batch's outputs are written.
    data_source: str
    # The SinkSpec fields of the built-in kinds this kind reads (``spec.KIND_FIELDS``); another's is refused.
    fields: tuple[str, ...] = ()
    # The delivery guarantees it offers (``GUARANTEES``). EXACTLY_ONCE is the two-phase contract below;
    # a kind offering the others writes visibly in ``pre_commit`` when ``sink_plan.guarantee`` says so,
    # and its participant then has nothing to commit or take back. NO_GUARANTEE outputs are never
    # written by a replay or a retried attempt: ``run_batch`` records an empty vote for them instead.
    guarantees: tuple[str, ...] = (EXACTLY_ONCE,)

    def check_options(self, sink: SinkSpec) -> None:
        """Refuse ``sink.options`` this kind does not take or cannot use, with a ConfigurationError
        that names the option and the fix [wherever a SinkSpec is made: DAG parsing, Spark].
        Default: it takes none."""
        refuse_options(sink)

    def location(self, sink: SinkSpec, warehouse: str) -> str:
        """Where the output lives: a path under the warehouse, a topic, a table [anywhere]."""

    def asset_uri(self, sink: SinkSpec, warehouse: str) -> str:
        """The URI of the output's Airflow Asset [DAG parsing]."""

    def kafka_topics(self, sink: SinkSpec) -> tuple[str, ...]:
        """The Kafka topics the output is written to: the pipeline's principals are granted their ACLs
        (``onceflow.kafka.acls``) [onceflow acls]. Default: none."""
        return ()

    def transactional_ids(self, pipeline: str, sink: SinkPlan, batch_seq: int) -> tuple[str, ...]:
        """The ids of the transactions the sink's splits may open in batch ``batch_seq``, derived so
        that a rollback can fence them even when the job died before voting, and shared with no batch
        nearer than ``onceflow.core.plan.TXN_ID_POOL`` (the planners finish that one first); () if none
        [planning].
        Default: none."""
        return ()

    def vote_lifetime(self, sink: SinkSpec) -> timedelta | None:
        """How long a pre-committed output stays committable (None: no bound) [DAG parsing:
        the spark task's execution_timeout]. Default: no bound."""
        return None

    def open_transactions(self, sink: SinkSpec, vote: Vote) -> list[OpenTransaction]:
        """What ``vote`` holds open until the decision is applied, each with the time it began and
        how long the system keeps it; [] for a kind without any [UI, status]. Default: []."""
        return []

    def check(self, sink: SinkSpec, deployment: Deployment) -> None:
        """Fail fast, naming the setting and the fix, on a deployment this output
        cannot work with [plan task, before a batch is planned]. Default: no check."""
        return None

    def reprocess(self, sink: SinkSpec) -> str | None:
        """What a batch that reprocesses a committed interval does to this output:
        ``"replaced"`` (the earlier batch's output is removed in the same commit) or
        ``"republished"`` (published again beside it); None when it can do neither
        safely, so reprocessing is refused [plan task of an interval pipeline]. Default: None."""
        return None

    def participant(self, pipeline: PipelineSpec, sink: SinkSpec, deployment: Deployment) -> Participant:
        """The commit side: verifies, commits and aborts the sink's batches [Airflow worker]."""

    def pre_commit(self, frame: Any, sink: SinkSpec, sink_plan: SinkPlan, deployment: Deployment,
                   job_options: Mapping[str, str]) -> None:
        """Write ``frame`` so that nothing is visible, and vote through ``record_vote`` [Spark driver;
        the writes run on executors]. ``frame`` arrives repartitioned into ``sink_plan.splits``
        partitions: Spark partition i is split i. ``job_options`` (``JOB_OPTIONS``: pipeline,
        deployment, sink, batch_seq, planned_at_ms, attempt, and replaces or faults when they apply)
        go to the data source unchanged: ``record_vote`` needs them."""

    def committed_output(self, spark: Any, sink: SinkSpec, pipeline: PipelineSpec, deployment: Deployment,
                         scope: AuditScope) -> CommittedOutput:
        """What any reader of the output sees of the batches in ``scope``, each row with the batch that
        wrote it, told apart by the output's own marks, never by the ledger's votes (but see
        ``AuditScope.committed``) [``onceflow audit``: Spark driver; the reads run on executors]."""


def job_options(pipeline: str, deployment: str, sink: str, batch_seq: int, planned_at_ms: int, attempt: int,
                replaces: int | None = None) -> dict[str, str]:
    """``JOB_OPTIONS`` for one output of one batch attempt [Spark driver: the batch job]."""
    options = {"pipeline": pipeline, "deployment": deployment, "sink": sink, "batch_seq": str(batch_seq),
               "planned_at_ms": str(planned_at_ms), "attempt": str(attempt), **job_fault_options()}
    if replaces is not None:
        options["replaces"] = str(replaces)
    return options


# What a kind must define itself; the rest of SinkKind has defaults.
REQUIRED = ("name", "data_source", "location", "asset_uri", "participant", "pre_commit", "committed_output")


def missing_members(kind: object) -> list[str]:
    """The members of ``REQUIRED`` that ``kind`` does not define."""
    return [m for m in REQUIRED
            if getattr(kind, m, None) is None or getattr(type(kind), m, None) is getattr(SinkKind, m, object())]


def refuse_options(sink: SinkSpec, takes: tuple[str, ...] = ()) -> None:
    """A ConfigurationError for each option of ``sink`` outside ``takes`` (a kind's ``check_options``)."""
    unknown = sorted(set(sink.options) - set(takes))
    if unknown:
        offer = f"it takes {', '.join(takes)}" if takes else "it takes none"
        raise ConfigurationError(f"sink {sink.name!r}: option(s) {', '.join(unknown)} are not options of a "
                                 f"{sink.kind} sink ({offer}): remove them")


# The Spark data source that reads committed Parquet back for the audit (onceflow.sinks.committed_reader).
COMMITTED_PARQUET = "onceflow_committed_parquet"


def committed_parquet(spark, files: list[list[str]], schema, options: Mapping[str, str]):
    """``files`` ([uri, batch id], ...) read back as ``schema`` plus a ``batch`` column (an audit's read)."""
    from pyspark.sql.types import StringType, StructField, StructType

    with_batch = StructType([*schema.fields, StructField("batch", StringType())])
    return (spark.read.format(COMMITTED_PARQUET).schema(with_batch).option("files", json.dumps(files))
            .options(**options).load())
