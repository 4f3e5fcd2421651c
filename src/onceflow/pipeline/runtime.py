"""Where a pipeline runs, and the objects that run it there.

A ``Deployment`` says where: the warehouse (``file:///...``, ``s3://bucket/
prefix`` or ``hdfs://...``; the ledger lives in it under ``_onceflow/``), the
Kafka cluster and the S3 endpoint. ``PipelineRuntime`` builds, from a spec and
a deployment, the coordinator with one participant per sink, the read-only view
of the ledger (``reader``) and the Kafka offset source. Used on the Airflow
worker (plan/commit/rollback), in the Spark driver (attempts and votes), by the
CLI (status, recover, audit) and the UI page.
"""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Any

from onceflow.config.deployment import Deployment, is_s3_uri  # noqa: F401  (where users import them from)
from onceflow.core.plan import SinkPlan
from onceflow.core.planning.config import PlanConfig
from onceflow.core.planning.run_inputs import RunInputs
from onceflow.sinks import sink_kind
from onceflow.pipeline.spec import PipelineSpec
from onceflow.storage import warehouse_storage
from onceflow.core.batch_view import LedgerView
from onceflow.core.coordinator import Coordinator
from onceflow.core.errors import RetryLater
from onceflow.core.ledger.storage import open_ledger_storage
from onceflow.core.planning.interval_planner import committed_prefix, IntervalPlanner


RUN_LOOKBACK = 100
log = logging.getLogger(__name__)


class PipelineRuntime:
    def __init__(self, spec: PipelineSpec, deployment: Deployment, identity: str | None = None):
        self.spec = spec
        self.deployment = deployment
        self.identity = identity

    # -- where things are ------------------------------------------------------
    def sink_uri(self, sink_name: str) -> str:
        """Where a sink's output lives (a file sink: its warehouse path; Kafka: its topic)."""
        sink = self.spec.sink(sink_name)
        return sink_kind(sink.kind).location(sink, self.deployment.warehouse)

    # -- the protocol objects ----------------------------------------------------
    @cached_property
    def storage(self):
        """The warehouse's storage (``onceflow.storage``), one per runtime."""
        return warehouse_storage(self.deployment)

    @cached_property
    def ledger_storage(self):
        return open_ledger_storage(self.deployment.warehouse, self.storage)

    def check_kafka(self) -> None:
        """Fail at once, naming the setting, when the Kafka cluster refuses this process's credentials or
        certificate (``onceflow.kafka.connection``): what every task and the Spark driver do first."""
        from onceflow.kafka.connection import check_connection

        check_connection(self.deployment.kafka.config())

    def check_outputs(self) -> None:
        """Each sink kind's fail-fast check of the deployment (plan task)."""
        for sink in self.spec.sinks:
            sink_kind(sink.kind).check(sink, self.deployment)

    def participants(self) -> dict[str, Any]:
        """One participant per sink, each made by its sink's kind."""
        return {sink.name: sink_kind(sink.kind).participant(self.spec, sink, self.deployment) for sink in self.spec.sinks}

    @cached_property
    def coordinator(self):
        return Coordinator(self.ledger_storage, self.spec.name, self.participants(), identity=self.identity)

    @cached_property
    def reader(self):
        """The ledger, read only (``core.batch_view.LedgerView``: status, the UI page, the audit, the
        input lag): it commits nothing and builds no participant, so it needs no sink client (nor,
        on HDFS, a JVM of its own)."""
        return LedgerView(self.ledger_storage, self.spec.name, [s.name for s in self.spec.sinks])

    def batch_of_run(self, run_id: str, lookback: int = RUN_LOOKBACK):
        """Status of the newest batch an Airflow run planned, or None.

        Plans carry their run id; the newest ``lookback`` batches are searched
        (a cleared run older than that is planned as a new batch: never a
        duplicate, because planning starts where the last commit ended)."""
        reader = self.reader
        latest = reader.latest_seq()
        for seq in range(latest, max(0, latest - lookback), -1):
            plan = reader.ledger.read_plan(seq)
            if plan is not None and plan.run_id == run_id:
                return reader.batch(seq, plan=plan).status()
        return None

    def after_commit(self, plan) -> None:
        """Once a batch is COMMITTED: mirror its input offsets to the consumer
        group, then each participant's ``after_commit`` (the Kafka sinks drop
        the staged copies kept to repair a transaction the broker aborted). A
        participant's failure there is logged, and the others still run.
        Idempotent; run by the commit task, by a rollback that finished a
        commit, and by the next plan task for a batch its recovery committed."""
        self.mirror_offsets(plan)
        for name, participant in self.coordinator.participants.items():
            try:
                participant.after_commit(plan)
            except Exception as exc:  # the batch is committed: a leftover must not hold back its Asset event or the next batch
                log.warning("batch %s of %s is committed, but %s's step after the commit failed: %s",
                            plan.batch_id, self.spec.name, name, exc)

    def mirror_offsets(self, plan) -> None:
        """After a commit: the input consumer group's offsets become the batch's
        range ends (an interval pipeline: those of its committed prefix, which a
        batch committed out of order does not extend), so lag tools show the
        truth. Forward-only and idempotent."""
        from onceflow.sources.kafka.offsets_mirror import mirror_offsets

        if plan.interval is not None:
            prefix = committed_prefix(self.coordinator)
            if prefix is None:
                return  # no interval is committed from the first one on yet
            plan = prefix
        result = mirror_offsets(self.deployment.kafka.config(), self.spec.group_id, plan.ranges)
        if not result.ok:
            raise RetryLater(f"batch {plan.batch_id} of {self.spec.name} is committed, but {result.detail}; retry the task")

    def offset_source(self, timeout_s: float = 30.0):
        """The input log as planning sees it; use as a context manager."""
        from onceflow.kafka.offsets import KafkaOffsetSource

        return KafkaOffsetSource(self.deployment.kafka.config(), timeout_s=timeout_s)

    def interval_planner(self, inputs: RunInputs | None = None):
        """The plan task's planner of an interval pipeline (``onceflow.core.planning.interval_planner``)."""
        return IntervalPlanner(self.coordinator, self.plan_config(inputs), grace_ms=self.spec.interval_grace_s * 1000,
                               pool=self.spec.batches_in_flight)

    def plan_config(self, inputs: RunInputs | None = None) -> PlanConfig:
        """The planner's configuration: the spec's, with what this run asked for (validated ``RunInputs``)."""
        inputs = inputs or RunInputs()
        max_records = inputs.max_records_per_partition or self.spec.max_records_per_partition
        sinks = tuple(SinkPlan(s.name, s.kind, s.splits, guarantee=s.guarantee) for s in self.spec.sinks)
        return PlanConfig(
            topics=self.spec.topics,
            sinks=sinks,
            start=self.spec.start,
            max_records_per_partition=max_records,
            records_per_split=self.spec.records_per_split,
            transactional_ids=lambda pipeline, sink, seq: sink_kind(sink.kind).transactional_ids(pipeline, sink, seq),
            transform_params=dict(inputs.transform),
        )
