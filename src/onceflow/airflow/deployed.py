"""A pipeline as ``pipeline_dag`` deployed it: its spec, its warehouse and the
Airflow connections that reach its services (never a secret).

The protocol tasks build their runtime from it. ``pipeline_dag`` also writes
it as the commit task's ``doc_json`` (the one protocol task every shape of the DAG has), which
Airflow serializes with the DAG: the UI plugin reads it from there (``from_doc``), so the
api-server never runs DAG code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from onceflow.config.deployment import Deployment, is_s3_uri
from onceflow.pipeline.spec import PipelineSpec
from onceflow.airflow.hooks.iceberg import IcebergCatalogHook
from onceflow.airflow.hooks.kafka import KafkaConfigHook
from onceflow.airflow.hooks.s3 import S3ConnectionHook
from onceflow.pipeline.runtime import PipelineRuntime

def catalog_conn_ids(spec: PipelineSpec) -> list[str]:
    """The Airflow connections of the catalogs of the pipeline's table outputs."""
    return sorted({s.catalog for s in spec.sinks if s.catalog})


DOC_KEY = "onceflow_pipeline"  # the key of the commit task's doc_json
PLAN_TASK_ID = "plan"
SPARK_TASK_ID = "spark"
COMMIT_TASK_ID = "commit"
# The XCom key under which the task that plans (the plan task, or the spark task in a DAG without one)
# leaves the run's batch for the tasks after it, the moment its plan is in the ledger.
PLAN_XCOM_KEY = "onceflow_plan"


@dataclass(frozen=True)
class DeployedPipeline:
    dag_id: str
    spec: PipelineSpec
    warehouse: str
    kafka_conn_id: str
    aws_conn_id: str | None

    def deployment(self) -> Deployment:
        """The deployment, from the Airflow connections (Airflow worker, api-server)."""
        s3 = None
        if is_s3_uri(self.warehouse):
            s3 = S3ConnectionHook(self.aws_conn_id).connection(f"warehouse {self.warehouse}")
        catalogs = {conn_id: IcebergCatalogHook(conn_id).properties() for conn_id in catalog_conn_ids(self.spec)}
        return Deployment(self.warehouse, KafkaConfigHook(self.kafka_conn_id).cluster(), s3, catalogs)

    def to_doc(self) -> str:
        """This pipeline as the commit task's ``doc_json`` (shown in Airflow's task details)."""
        spec = json.loads(self.spec.without_params().to_json())  # the UI needs none of the params
        return json.dumps(
            {DOC_KEY: {"spec": spec, "warehouse": self.warehouse,
                       "kafka_conn_id": self.kafka_conn_id, "aws_conn_id": self.aws_conn_id}},
            indent=1, sort_keys=True,
        )

    @classmethod
    def from_doc(cls, dag_id: str, doc_json: str | None) -> "DeployedPipeline | None":
        """The pipeline a commit task's ``doc_json`` describes; None if it is not one of ours."""
        try:
            raw = json.loads(doc_json or "{}").get(DOC_KEY)
        except (ValueError, AttributeError):
            return None
        if not raw:
            return None
        spec = PipelineSpec.from_json(json.dumps(raw["spec"]))
        return cls(dag_id, spec, raw["warehouse"], raw["kafka_conn_id"], raw.get("aws_conn_id"))

    def runtime(self, identity: str | None = None):
        return PipelineRuntime(self.spec, self.deployment(), identity=identity)

