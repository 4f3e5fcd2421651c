"""Where a pipeline runs: the warehouse, the Kafka cluster, the S3 connection
and the catalogs of its Iceberg tables.

The warehouse (``file:///...``, ``s3://bucket/prefix`` or ``hdfs://...``)
holds the file outputs, the ledger (``_onceflow/``) and the Kafka sinks'
staged copies. A ``Deployment`` crosses into Spark once, as ``to_option()``
(no secrets), and each worker adds its own secrets back (``from_option``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Mapping

from onceflow.config.iceberg_catalogs import public_properties, secret_properties
from onceflow.config.kafka_cluster import KafkaCluster, is_secret
from onceflow.config.s3_connection import S3Connection
from onceflow.config import settings
from onceflow.config.settings import ICEBERG_CATALOGS_VAR, ConfigurationError
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
    # Iceberg catalog connection id -> pyiceberg catalog properties (may hold secrets: not in repr).
    catalogs: Mapping[str, Mapping[str, str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "warehouse", self.warehouse.rstrip("/"))
        if self.on_s3 and self.s3 is None:
            raise ConfigurationError(
                f"warehouse {self.warehouse} is on S3 but no S3 connection is configured: set the aws "
                "connection (Airflow), or AWS_* variables and, for a non-AWS store, ONCEFLOW_S3_ENDPOINT"
            )

    @property
    def on_s3(self) -> bool:
        return is_s3_uri(self.warehouse)

    @classmethod
    def from_environment(cls, warehouse: str | None = None) -> "Deployment":
        """Spark driver and CLI: ``ONCEFLOW_WAREHOUSE`` (or ``warehouse``), Kafka
        and S3 as ``onceflow.config.settings`` says. Fails fast on what is missing."""
        warehouse = warehouse or os.environ.get(WAREHOUSE_VAR)
        if not warehouse:
            raise ConfigurationError(
                f"{WAREHOUSE_VAR} is not set: export the warehouse URI (file:///path, s3://bucket/prefix or hdfs://...)"
            )
        s3 = S3Connection.from_environment().checked(f"warehouse {warehouse}") if is_s3_uri(warehouse) else None
        return cls(warehouse, KafkaCluster.from_environment(), s3, settings.iceberg_catalogs())

    def catalog_properties(self, conn_id: str | None, what: str) -> dict[str, str]:
        """The properties of Iceberg catalog ``conn_id``, or a ConfigurationError for ``what`` naming the fix."""
        if not conn_id:
            raise ConfigurationError(f"{what}: no catalog: set SinkSpec(catalog=...) to the Airflow connection of its catalog")
        if conn_id not in self.catalogs:
            raise ConfigurationError(
                f"{what}: Iceberg catalog {conn_id!r} is not configured: create the Airflow connection {conn_id!r} "
                f"(type onceflow_iceberg, extra: the pyiceberg catalog properties), or outside Airflow set "
                f"{ICEBERG_CATALOGS_VAR} to {{{conn_id!r}: {{...properties}}}}"
            )
        return dict(self.catalogs[conn_id])

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
                    "profile": self.kafka.profile,
                },
                "s3": None if self.s3 is None else self.s3.public(),
                "catalogs": {name: public_properties(props) for name, props in self.catalogs.items()},
            },
            sort_keys=True,
        )

    @classmethod
    def from_option(cls, text: str) -> "Deployment":
        """Spark executor / Python worker: the deployment from ``to_option``;
        Kafka secrets from ``ONCEFLOW_KAFKA_CONFIG``, catalog secrets from
        ``ONCEFLOW_ICEBERG_CATALOGS``, S3 credentials from the worker's own AWS
        credential chain."""
        raw = json.loads(text)
        secrets = {k: v for k, v in settings.kafka_client_config().items() if is_secret(k)}
        kafka = KafkaCluster(raw["kafka"]["bootstrap"], {**raw["kafka"]["client_config"], **secrets},
                             raw["kafka"].get("profile", "apache"))
        s3 = None
        if raw["s3"]:
            s3 = S3Connection(**raw["s3"]).checked(f"this Spark worker (warehouse {raw['warehouse']}; {EXECUTOR_SECRETS_HINT})")
        local = settings.iceberg_catalogs()
        catalogs = {name: {**props, **secret_properties(local.get(name, {}))} for name, props in raw.get("catalogs", {}).items()}
        return cls(raw["warehouse"], kafka, s3, catalogs)

