"""What a pipeline's DAG is built from, each setting resolved once (Airflow DAG-parsing time).

``pipeline_dag``'s arguments win; an omitted one is read from the environment of the DAG processor,
else takes its default. The ``DeployedPipeline`` inside is what the protocol tasks keep for run
time; the rest only shapes the DAG and its spark task.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from onceflow.airflow.deployed import DeployedPipeline
from onceflow.config.input_schedule import parse_schedule
from onceflow.config.settings import ConfigurationError
from onceflow.pipeline.spec import PipelineSpec
from onceflow.sinks import sink_kind

# A spark task may not hold the pipeline's one run slot forever; pass spark_timeout= for longer batches.
DEFAULT_SPARK_TIMEOUT = timedelta(hours=2)
# pipeline_dag's schedule= default: the schedule ONCEFLOW_SCHEDULE names, else the spec's.
SPEC_SCHEDULE = "spec"


def spark_timeout_of(spec: PipelineSpec) -> timedelta:
    """The spark task's execution_timeout: the shortest time any sink's pre-commit
    stays committable (work after that is refused by the commit), else the default."""
    lifetimes = [life for s in spec.sinks if (life := sink_kind(s.kind).vote_lifetime(s)) is not None]
    return min(lifetimes, default=DEFAULT_SPARK_TIMEOUT)


def default_spark_binary() -> str:
    """The spark-submit installed beside this interpreter (the pyspark wheel's),
    else the one on PATH, as the Spark provider does."""
    beside = Path(sys.executable).parent / "spark-submit"
    return str(beside) if beside.exists() else "spark-submit"


@dataclass(frozen=True)
class DagSettings:
    deployed: DeployedPipeline  # dag_id, spec, warehouse, the protocol tasks' Kafka and S3 connections
    schedule: Any               # as given, in any of its forms (dag_schedule resolves it)
    spark_conn_id: str
    spark_kafka_conn_id: str    # the spark task's own Kafka connection (a principal that only writes)
    spark_binary: str
    spark_timeout: timedelta
    spark_conf: dict[str, str] = field(default_factory=dict)  # on top of submit_defaults()
    plan_in_spark_task: bool = False  # no plan task: the spark task plans the batch before its job

    @property
    def spec(self) -> PipelineSpec:
        return self.deployed.spec

    @property
    def dag_id(self) -> str:
        return self.deployed.dag_id


def dag_settings(
    spec: PipelineSpec,
    *,
    dag_id: str | None = None,
    warehouse: str | None = None,
    schedule: Any = SPEC_SCHEDULE,
    kafka_conn_id: str | None = None,
    spark_kafka_conn_id: str | None = None,
    aws_conn_id: str | None = None,
    spark_conn_id: str | None = None,
    spark_conf: dict[str, str] | None = None,
    spark_binary: str | None = None,
    spark_timeout: timedelta | None = None,
    plan_in_spark_task: bool = False,
) -> DagSettings:
    """The settings given, each omitted one from the environment or its default."""
    warehouse = warehouse or os.environ.get("ONCEFLOW_WAREHOUSE")
    if not warehouse:
        raise ConfigurationError(
            f"pipeline {spec.name!r}: no warehouse. Pass warehouse='s3://bucket/prefix' (or file:///path) to "
            "pipeline_dag, or set ONCEFLOW_WAREHOUSE for the DAG processor and workers"
        )
    kafka_conn_id = kafka_conn_id or os.environ.get("ONCEFLOW_KAFKA_CONN", "onceflow_kafka")
    if schedule == SPEC_SCHEDULE:
        schedule = parse_schedule(os.environ.get("ONCEFLOW_SCHEDULE") or spec.schedule)
    return DagSettings(
        deployed=DeployedPipeline(dag_id or spec.name, spec, warehouse, kafka_conn_id,
                                  aws_conn_id or os.environ.get("ONCEFLOW_S3_CONN", "onceflow_s3")),
        schedule=schedule,
        spark_conn_id=spark_conn_id or os.environ.get("ONCEFLOW_SPARK_CONN", "onceflow_spark"),
        spark_kafka_conn_id=spark_kafka_conn_id or os.environ.get("ONCEFLOW_SPARK_KAFKA_CONN") or kafka_conn_id,
        spark_binary=spark_binary or default_spark_binary(),
        spark_timeout=spark_timeout or spark_timeout_of(spec),
        spark_conf=dict(spark_conf or {}),
        plan_in_spark_task=plan_in_spark_task,
    )
