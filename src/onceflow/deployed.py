"""A pipeline as ``pipeline_dag`` deployed it: its spec, its warehouse and the
Airflow connections that reach its services.

The protocol tasks build their runtime from it, and the UI plugin finds every
deployed pipeline by importing the DAG files (``discovery.deployed_in_folder``):
each ``pipeline_dag`` call registers one here, keyed by DAG id.
"""

from __future__ import annotations

from dataclasses import dataclass

from .deployment import Deployment, is_s3_uri
from .spec import PipelineSpec


@dataclass(frozen=True)
class DeployedPipeline:
    dag_id: str
    spec: PipelineSpec
    warehouse: str
    kafka_conn_id: str
    aws_conn_id: str | None

    def deployment(self) -> Deployment:
        """The deployment, from the Airflow connections (Airflow worker, api-server)."""
        from .hooks.kafka import KafkaConfigHook
        from .hooks.s3 import S3ConnectionHook

        s3 = None
        if is_s3_uri(self.warehouse):
            s3 = S3ConnectionHook(self.aws_conn_id).connection(f"warehouse {self.warehouse}")
        return Deployment(self.warehouse, KafkaConfigHook(self.kafka_conn_id).cluster(), s3)

    def runtime(self, identity: str | None = None):
        from .runtime import PipelineRuntime

        return PipelineRuntime(self.spec, self.deployment(), identity=identity)


_DEPLOYED: dict[str, DeployedPipeline] = {}


def register(pipeline: DeployedPipeline) -> None:
    _DEPLOYED[pipeline.dag_id] = pipeline


def deployed() -> dict[str, DeployedPipeline]:
    """Every pipeline the DAG files imported by this process deployed, by DAG id."""
    return dict(_DEPLOYED)
