"""Start every service the dev kit has from the checkout this file is in, then stop them all.

Run by test_checkout_path.py as ``python -m tests.integration.devkit.services.every_service
NAME...`` (``STARTERS``) from a checkout (its working directory; its packages first on the path), so the
code that starts the services is that checkout's. Each service keeps its state under
``<checkout>/.onceflow/every-service/``, as ``make test``'s do under ``.onceflow/test/``.

Prints one JSON line first, the file of each package it runs, then one per service started:
its name, the seconds its start took and the directory of its state. Whatever started is
stopped before it exits, and everything dies with the caller.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

import onceflow
import onceflow_devkit
import onceflow_examples
import onceflow_postgres_sink

PACKAGES = (onceflow, onceflow_devkit, onceflow_examples, onceflow_postgres_sink)


def _report(name: str, started: float, state: Path, **facts: str) -> None:
    print(json.dumps({"service": name, "seconds": round(time.monotonic() - started, 1), "state": str(state), **facts}),
          flush=True)


def _process(stack: ExitStack, home: Path, name: str):
    from onceflow_devkit.services.process import ManagedProcess

    proc = ManagedProcess(name, home / name).reset()
    stack.callback(proc.stop, grace=5)
    return proc


def _stack(stack: ExitStack, home: Path) -> None:
    """The embedded stack (`onceflow services up`): S3, Apache Kafka, PostgreSQL."""
    from onceflow_devkit.services.stack import EmbeddedStack

    started = time.monotonic()
    embedded = EmbeddedStack(home / "stack", die_with_parent=True, usual_ports=False)
    stack.callback(embedded.down)
    embedded.up()
    for service in embedded.status():
        _report(service["service"], started, Path(service["log"]).parent)


def _compatible_brokers(stack: ExitStack, home: Path) -> None:
    from onceflow_devkit.services.kafka_broker import COMPATIBLE, start_broker
    from onceflow_devkit.services.s3 import start_moto

    s3 = start_moto(_process(stack, home, "s3-for-tansu"), die_with_parent=True)
    for broker in COMPATIBLE:
        started = time.monotonic()
        proc = _process(stack, home, f"kafka-{broker}")
        start_broker(broker, proc, s3=s3, die_with_parent=True)
        _report(f"kafka-{broker}", started, proc.directory)


def _redis(stack: ExitStack, home: Path):
    from onceflow_devkit.services.redis import start_redis

    started = time.monotonic()
    proc = _process(stack, home, "redis")
    server = start_redis(proc, die_with_parent=True)
    _report("redis", started, proc.directory)
    return server


def _spark_connect(stack: ExitStack, home: Path) -> None:
    from onceflow_devkit.services.spark_connect import start_connect_server

    started = time.monotonic()
    proc = _process(stack, home, "spark-connect")
    start_connect_server(proc, die_with_parent=True)
    _report("spark-connect", started, proc.directory)


def _iceberg_rest(stack: ExitStack, home: Path) -> None:
    from onceflow_devkit.services.rest_catalog import start_rest_catalog

    started = time.monotonic()
    proc = _process(stack, home, "iceberg-rest")
    start_rest_catalog(proc, f"file://{home}/warehouse/iceberg", die_with_parent=True)
    _report("iceberg-rest", started, proc.directory)


def _spark_standalone(stack: ExitStack, home: Path) -> None:
    from onceflow_devkit.services.spark_standalone import start_standalone

    started = time.monotonic()
    master, worker = _process(stack, home, "spark-master"), _process(stack, home, "spark-worker")  # stopped worker first
    start_standalone(master, worker, cores=1, memory="512m", die_with_parent=True)
    _report("spark-standalone", started, master.directory)


def _hdfs(stack: ExitStack, home: Path) -> None:
    from onceflow_devkit.services.hdfs import start_hdfs

    started = time.monotonic()
    namenode, datanode = _process(stack, home, "hdfs-namenode"), _process(stack, home, "hdfs-datanode")
    start_hdfs(namenode, datanode, die_with_parent=True)
    _report("hdfs", started, namenode.directory)


def _airflow(stack: ExitStack, home: Path) -> None:
    """Airflow as the system tests run it: its metadata on the dev kit's PostgreSQL, the Celery executor
    on Redis, a triggerer, and the checkout's DAG files parsed."""
    from onceflow.config.kafka_cluster import KafkaCluster
    from onceflow_devkit.airflow_env import onceflow_airflow
    from onceflow_devkit.services.postgres import start_postgres

    started = time.monotonic()
    postgres_process = _process(stack, home, "postgres")
    postgres = start_postgres(postgres_process, die_with_parent=True)
    _report("postgres", started, postgres_process.directory)
    redis = _redis(stack, home)
    started = time.monotonic()
    airflow = onceflow_airflow(home / "airflow", KafkaCluster("127.0.0.1:9"), f"file://{home}/warehouse",
                               postgres=postgres, celery=redis, triggerer=True)
    stack.callback(airflow.stop, grace=5)
    airflow.start(timeout=600)
    with airflow.api() as api:
        dag = api.wait_for_dag("clickstream_exactly_once", timeout=300)
    _report("airflow", started, airflow.home, dags=dag["fileloc"])


STARTERS: dict[str, Callable[[ExitStack, Path], object]] = {
    "stack": _stack, "redis": _redis, "spark-connect": _spark_connect, "hdfs": _hdfs,
    "spark-standalone": _spark_standalone, "compatible-brokers": _compatible_brokers, "airflow": _airflow,
    "iceberg-rest": _iceberg_rest,
}


def main(names: list[str]) -> None:
    print(json.dumps({"packages": {p.__name__: p.__file__ for p in PACKAGES}}), flush=True)
    home = Path.cwd().resolve() / ".onceflow" / "every-service"
    with ExitStack() as stack:
        for name in names:
            STARTERS[name](stack, home)


if __name__ == "__main__":
    main(sys.argv[1:])
