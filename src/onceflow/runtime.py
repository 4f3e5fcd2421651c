"""Where a pipeline runs, and the objects that run it there.

A ``Deployment`` says where: the warehouse (``file:///...``, ``s3://bucket/
prefix`` or ``hdfs://...``; the ledger lives in it under ``_onceflow/``), the
Kafka cluster and the S3 endpoint. ``PipelineRuntime`` builds, from a spec and
a deployment, the coordinator with one participant per sink and the Kafka
offset source. Used on the Airflow worker (plan/commit/rollback), in the Spark
driver (attempts and votes) and by the CLI (status, audit).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from .kafka.cluster import KafkaCluster, is_secret
from .protocol.plan import SinkPlan
from .protocol.planning import PlanConfig
from .s3_connection import S3Connection
from .settings import ConfigurationError
from .spec import FILES, KAFKA, PipelineSpec


RUN_LOOKBACK = 100
WAREHOUSE_VAR = "ONCEFLOW_WAREHOUSE"
# Executors never see the spark task's environment; say how secrets reach them.
EXECUTOR_SECRETS_HINT = (
    "executors do not inherit the spark task's environment: give them the AWS_* variables "
    "(spark.executorEnv.*) or a role of their own"
)


def is_s3_uri(uri: str) -> bool:
    return uri.startswith(("s3://", "s3a://"))


@dataclass(frozen=True)
class Deployment:
    warehouse: str
    kafka: KafkaCluster
    s3: S3Connection | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "warehouse", self.warehouse.rstrip("/"))
        if self.on_s3 and self.s3 is None:
            raise ConfigurationError(
                f"warehouse {self.warehouse} is on S3 but no S3 connection is configured: set the aws "
                "connection (Airflow), or AWS_* variables and, for a non-AWS store, ONCEFLOW_S3_ENDPOINT"
            )

    def path(self, *parts: str) -> str:
        return "/".join([self.warehouse, *(p.strip("/") for p in parts)])

    @property
    def on_s3(self) -> bool:
        return is_s3_uri(self.warehouse)

    @classmethod
    def from_environment(cls, warehouse: str | None = None) -> "Deployment":
        """Spark driver and CLI: ``ONCEFLOW_WAREHOUSE`` (or ``warehouse``), Kafka
        and S3 as ``onceflow.settings`` says. Fails fast on what is missing."""
        warehouse = warehouse or os.environ.get(WAREHOUSE_VAR)
        if not warehouse:
            raise ConfigurationError(
                f"{WAREHOUSE_VAR} is not set: export the warehouse URI (file:///path, s3://bucket/prefix or hdfs://...)"
            )
        s3 = S3Connection.from_environment().checked(f"warehouse {warehouse}") if is_s3_uri(warehouse) else None
        return cls(warehouse, KafkaCluster.from_environment(), s3)

    def to_option(self) -> str:
        """This deployment without its secrets, for Spark data source options
        (options show up in query plans). ``from_option`` adds the secrets
        back from the worker's environment."""
        return json.dumps(
            {
                "warehouse": self.warehouse,
                "kafka": {
                    "bootstrap": self.kafka.bootstrap,
                    "client_config": {k: v for k, v in self.kafka.client_config.items() if not is_secret(k)},
                },
                "s3": None if self.s3 is None else self.s3.public(),
            },
            sort_keys=True,
        )

    @classmethod
    def from_option(cls, text: str) -> "Deployment":
        """Spark executor / Python worker: the deployment from ``to_option``;
        Kafka secrets from ``ONCEFLOW_KAFKA_CONFIG``, S3 credentials from the
        worker's own AWS credential chain."""
        from . import settings

        raw = json.loads(text)
        secrets = {k: v for k, v in settings.kafka_client_config().items() if is_secret(k)}
        kafka = KafkaCluster(raw["kafka"]["bootstrap"], {**raw["kafka"]["client_config"], **secrets})
        s3 = None
        if raw["s3"]:
            s3 = S3Connection(**raw["s3"]).checked(f"this Spark worker (warehouse {raw['warehouse']}; {EXECUTOR_SECRETS_HINT})")
        return cls(raw["warehouse"], kafka, s3)


def arrow_filesystem(uri: str, s3: S3Connection | None):
    """(pyarrow filesystem, path) for ``uri``: S3 through the given connection,
    anything else as pyarrow infers it. S3 paths are ``bucket/key``."""
    from pyarrow import fs

    if is_s3_uri(uri):
        if s3 is None:
            raise ConfigurationError(f"{uri} is on S3 but no S3 connection is configured")
        return s3.arrow_filesystem(), uri.split("://", 1)[1]
    return fs.LocalFileSystem(), uri.split("://", 1)[1] if uri.startswith("file://") else uri


class PipelineRuntime:
    def __init__(self, spec: PipelineSpec, deployment: Deployment, identity: str | None = None, spark: Any = None):
        self.spec = spec
        self.deployment = deployment
        self.identity = identity
        self.spark = spark

    # -- where things are ------------------------------------------------------
    def sink_uri(self, sink_name: str) -> str:
        sink = self.spec.sink(sink_name)
        if sink.kind != FILES:
            raise ConfigurationError(f"sink {sink_name!r} of {self.spec.name!r} is a {sink.kind} sink, not files")
        return self.deployment.path(sink.target)

    @property
    def kafka_staging_root(self) -> str:
        """Root of the staged copies of Kafka output, kept for repair
        (DESIGN.md §4), as a path of ``arrow_filesystem()``."""
        return arrow_filesystem(self.deployment.warehouse, self.deployment.s3)[1]

    # -- the protocol objects ----------------------------------------------------
    @cached_property
    def ledger_storage(self):
        from .ledger.backends import open_ledger_storage

        return open_ledger_storage(self.deployment.warehouse, spark=self.spark, s3=self.deployment.s3)

    def file_storage(self):
        from .files.s3 import S3Storage
        from .files.backends import storage_for

        if self.deployment.on_s3:
            return S3Storage(self.deployment.s3)
        return storage_for(self.deployment.warehouse)

    def file_storage_options(self) -> dict[str, str]:
        """``s3.*`` options for the file data source: endpoint and region only.
        Credentials reach executors through the standard AWS variables, never
        through options (options show up in query plans)."""
        return self.file_storage().options() if self.deployment.on_s3 else {}

    def arrow_filesystem(self):
        return arrow_filesystem(self.deployment.warehouse, self.deployment.s3)[0]

    def participants(self) -> dict[str, Any]:
        from .files.sink import FileSink
        from .kafka.sink import KafkaSinkParticipant

        result: dict[str, Any] = {}
        for sink in self.spec.sinks:
            if sink.kind == FILES:
                result[sink.name] = FileSink(sink.name, self.sink_uri(sink.name), storage=self.file_storage())
            else:
                result[sink.name] = KafkaSinkParticipant(
                    sink.name,
                    self.spec.name,
                    self.deployment.kafka.config(),
                    staging_root=self.kafka_staging_root,
                    filesystem=self.arrow_filesystem(),
                    transaction_timeout_ms=sink.transaction_timeout_ms,
                )
        return result

    @cached_property
    def coordinator(self):
        from .coordinator import Coordinator

        return Coordinator(self.ledger_storage, self.spec.name, self.participants(), identity=self.identity)

    def batch_of_run(self, run_id: str, lookback: int = RUN_LOOKBACK):
        """Status of the newest batch an Airflow run planned, or None.

        Plans carry their run id; the newest ``lookback`` batches are searched
        (a cleared run older than that is planned as a new batch: never a
        duplicate, because planning starts where the last commit ended)."""
        coordinator = self.coordinator
        latest = coordinator.latest_seq()
        for seq in range(latest, max(0, latest - lookback), -1):
            plan = coordinator.ledger.read_plan(seq)
            if plan is not None and plan.params.get("run_id") == run_id:
                return coordinator.describe(seq)
        return None

    def after_commit(self, plan) -> None:
        """Once a batch is COMMITTED: mirror its input offsets to the consumer
        group, then drop the Kafka sinks' staged copies (kept only to repair a
        transaction the broker aborted before the commit). Idempotent; run by
        the commit task, by a rollback that finished a commit, and by the next
        plan task for a batch its recovery committed."""
        self.mirror_offsets(plan)
        for participant in self.coordinator.participants.values():
            discard = getattr(participant, "discard_staging", None)
            if discard is not None:
                discard(plan)

    def mirror_offsets(self, plan) -> None:
        """After a commit: the input consumer group's offsets become the batch's
        range ends, so lag tools show the truth. Forward-only and idempotent."""
        from .kafka.offsets_mirror import mirror_offsets
        from .protocol.errors import RetryLater

        result = mirror_offsets(self.deployment.kafka.config(), self.spec.group_id, plan.ranges)
        if not result.ok:
            raise RetryLater(f"batch {plan.batch_id} of {self.spec.name} is committed, but {result.detail}; retry the task")

    def offset_source(self):
        """The input log as planning sees it; use as a context manager."""
        from .kafka.offsets import KafkaOffsetSource

        return KafkaOffsetSource(self.deployment.kafka.config())

    def plan_config(self, params: Mapping[str, Any] | None = None) -> PlanConfig:
        from .kafka.ids import transactional_id

        params = dict(params or {})
        max_records = params.get("max_records_per_partition", self.spec.max_records_per_partition)
        sinks = tuple(SinkPlan(s.name, s.kind, s.splits) for s in self.spec.sinks)
        return PlanConfig(
            topics=self.spec.topics,
            sinks=sinks,
            start=self.spec.start,
            max_records_per_partition=int(max_records) if max_records else None,
            transactional_id=transactional_id,
            params=params,
        )


def kafka_sink_topics(spec: PipelineSpec) -> dict[str, str]:
    return {s.name: s.target for s in spec.sinks if s.kind == KAFKA}

