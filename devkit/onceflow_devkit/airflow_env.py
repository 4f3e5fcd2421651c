"""A local Airflow set up to run onceflow's DAGs against given services.

Used by ``onceflow demo`` and the end-to-end tests (the caller's process);
Airflow itself runs in subprocesses. Connections follow the providers'
formats: ``onceflow_kafka`` (kafka: extra = librdkafka settings),
``onceflow_spark_kafka`` (the same, for the spark task's own principal on a secured broker:
``spark_kafka``), ``onceflow_spark`` (spark: host = master; or, given a Spark Connect server,
spark_connect: host and port), ``onceflow_s3`` (aws: login,
password, extra endpoint_url/region_name), ``onceflow_iceberg`` (extra: the
dev kit's catalog's properties, ``services.iceberg_catalog``: the REST catalog given, else the SQL one), ``onceflow_postgres``
(postgres: the dev kit's PostgreSQL server, ``services.postgres``). Airflow's own
metadata database is a database of that server (``local_airflow.metadata_database``).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Mapping

from onceflow_devkit.local_airflow import LocalAirflow
from onceflow_devkit.local_airflow.metadata_database import SQLITE_FALLBACK, airflow_database
from onceflow_devkit.services.iceberg_catalog import embedded_catalogs
from onceflow_devkit.services.postgres import CONN_ID as POSTGRES_CONN_ID, PostgresServer
from onceflow_devkit.services.redis import RedisServer
from onceflow_devkit.services.rest_catalog import RestCatalog
from onceflow_devkit.services.spark_connect import SparkConnectServer
from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.config.s3_connection import S3Connection

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The dev kit runs from a checkout: its example DAG files are the repository's.
DAGS_FOLDER = PROJECT_ROOT / "dags"
log = logging.getLogger(__name__)
SPARK_KAFKA_CONN_ID = "onceflow_spark_kafka"
SPARK_KAFKA_ENV = "ONCEFLOW_SPARK_KAFKA_CONN"  # what the DAG factory reads at parse time


def onceflow_airflow(
    home: Path,
    kafka: KafkaCluster,
    warehouse: str,
    s3: S3Connection | None = None,
    spark_master: str = "local[2]",
    extra_env: Mapping[str, str] | None = None,
    dags_folder: Path = DAGS_FOLDER,
    python: Path | None = None,
    plugins_folder: Path | None = PROJECT_ROOT / "plugins",
    spark_connect: SparkConnectServer | None = None,
    triggerer: bool = False,
    postgres: PostgresServer | None = None,
    celery: RedisServer | None = None,
    iceberg_rest: RestCatalog | None = None,
    spark_kafka: KafkaCluster | None = None,
) -> LocalAirflow:
    """``python``: the interpreter of the Airflow install to run (default: this one).
    ``spark_connect``: the spark tasks run as clients of that server instead of spark-submit.
    ``postgres``: the dev kit's PostgreSQL: it holds Airflow's metadata database (one per home, migrated)
    and is connection ``onceflow_postgres`` (the shop example's payments table). Without it, Airflow's
    metadata is SQLite, and a warning says so. ``celery``: the CeleryExecutor with two workers, that
    Redis server its broker, instead of the LocalExecutor. ``iceberg_rest``: the Iceberg catalog
    connection is that REST catalog's, not the SQL catalog of the warehouse. ``spark_kafka``: the cluster as
    the spark task's own principal sees it (a secured broker's ``onceflow-spark``, ``onceflow.kafka.acls``),
    connection ``onceflow_spark_kafka``, which the DAGs' spark tasks use (``ONCEFLOW_SPARK_KAFKA_CONN``);
    without it they use ``kafka``'s."""
    python = Path(python) if python else Path(sys.executable)
    if postgres is None:
        log.warning(SQLITE_FALLBACK)
    database = airflow_database(postgres, home, python) if postgres else None
    airflow = LocalAirflow(
        Path(home),
        dags_folder=dags_folder,
        plugins_folder=plugins_folder,
        extra_env={"ONCEFLOW_WAREHOUSE": warehouse, **({SPARK_KAFKA_ENV: SPARK_KAFKA_CONN_ID} if spark_kafka else {}),
                   **(extra_env or {})},
        triggerer=triggerer,
        python=python,
        database=database,
        migrated=database is not None,
        celery_broker=celery.url() if celery else None,
    )
    airflow.set_connection(
        "onceflow_kafka", {"conn_type": "onceflow_kafka", "extra": kafka.connection_extra()}
    )
    if spark_kafka is not None:
        airflow.set_connection(SPARK_KAFKA_CONN_ID, {"conn_type": "onceflow_kafka", "extra": spark_kafka.connection_extra()})
    airflow.set_connection("onceflow_spark", spark_connect.connection() if spark_connect else
                           {"conn_type": "spark", "host": spark_master})
    for conn_id, properties in embedded_catalogs(warehouse, s3, rest=iceberg_rest).items():
        airflow.set_connection(conn_id, {"conn_type": "onceflow_iceberg", "extra": properties})
    if postgres is not None:
        airflow.set_connection(POSTGRES_CONN_ID, postgres.connection())
    if s3 is not None:
        airflow.set_connection(
            "onceflow_s3",
            {
                "conn_type": "onceflow_s3",
                "login": s3.access_key,
                "password": s3.secret_key,
                "extra": {"endpoint_url": s3.endpoint_url, "region_name": s3.region},
            },
        )
    return airflow
