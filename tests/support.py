"""Helpers shared by tests (not fixtures: those are in conftest.py)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from onceflow_devkit.services.hdfs import HdfsCluster
from onceflow_devkit.services.kafka_broker import KafkaBroker

# The repository: tests at any depth find files here without counting parents.
ROOT = Path(__file__).resolve().parent.parent


def require(broker: KafkaBroker, capability: str) -> None:
    """Skip, naming the behaviour, when ``broker`` lacks ``capability``.

    A test that a broker cannot support is skipped with that reason, never
    weakened (docs/testing.md, "Broker capabilities")."""
    if not broker.has(capability):
        pytest.skip(reason=f"{broker.name} lacks: {capability}")


def hdfs_client_storage(spark, cluster: HdfsCluster, conf_dir: Path):
    """HadoopStorage on ``spark``'s JVM, its Hadoop configuration a copy of the session's that also
    reads ``cluster``'s client core-site.xml/hdfs-site.xml (the session's own keeps its defaultFS).

    The JVM caches one client per filesystem, made with the configuration of its first use: this
    one's is used at once, so Spark's own reads of ``cluster`` get it too."""
    from onceflow.storage.hadoop import HadoopStorage

    jvm = spark.sparkContext._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())
    client_conf = cluster.write_client_config(conf_dir)
    for site in ("core-site.xml", "hdfs-site.xml"):
        conf.addResource(jvm.org.apache.hadoop.fs.Path(str(client_conf / site)))
    storage = HadoopStorage(jvm, conf)
    assert storage.exists(f"{cluster.uri}/")
    return storage


@contextmanager
def spark_worker_env(spark, **env: str):
    """Inside it, the Python workers of functions ``spark`` wraps (UDFs, the data sources a job registers)
    get ``env`` as ``spark.executorEnv.*`` gives it: a deployment hands executors their Kafka secrets that
    way (docs/deploying.md), and a session's settings are fixed once it runs."""
    environment = spark.sparkContext.environment
    before = {k: environment.get(k) for k in env}
    environment.update(env)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                environment.pop(key, None)
            else:
                environment[key] = value
