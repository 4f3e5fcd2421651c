"""A Spark standalone cluster on 127.0.0.1: one master, one worker.

Runs on the machine that hosts the tests; what it is for is cluster mode.
With ``--master spark://...`` executors are JVMs the worker starts, with the
worker's environment plus the job's ``spark.executorEnv.*``: nothing of the
environment of the process that ran spark-submit reaches them, and their
Python workers import only what the job ships (``--py-files``), as on a real
cluster. (Python jobs on a standalone cluster run their driver on the
submitting machine: Spark refuses ``--deploy-mode cluster`` for them.)

Both daemons come from the pyspark package itself (``pyspark/bin/spark-class``).
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from onceflow_devkit.services.process import ManagedProcess, pick_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# Copied into the daemons' environment; everything else stays out of the executors'.
PASSED_VARIABLES = ("PATH", "HOME", "JAVA_HOME", "LANG", "TMPDIR")


@dataclass(frozen=True)
class SparkStandalone:
    master_url: str  # spark://127.0.0.1:port, for --master
    web_url: str     # the master's web UI; /json/ lists workers and applications

    def status(self) -> dict:
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=2) as response:
            return json.load(response)

    def completed_app_names(self) -> list[str]:
        return [app["name"] for app in self.status().get("completedapps", [])]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def daemon_env() -> dict[str, str]:
    """The environment of Spark daemons started here: a few basics, nothing of this process's secrets."""
    env = {k: os.environ[k] for k in PASSED_VARIABLES if k in os.environ}
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        # The master's REST submission server would take port 6066 whatever else runs here.
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        # Executors without AWS keys try boto3's chain: it must never ask a cloud metadata address from here.
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def start_standalone(
    master: ManagedProcess,
    worker: ManagedProcess,
    cores: int = 2,
    memory: str = "2g",
    die_with_parent: bool = False,
) -> SparkStandalone:
    """Start the master, then a worker offering ``cores`` and ``memory``; ready once it registered."""
    spark_class = str(spark_home() / "bin" / "spark-class")
    env = daemon_env()
    port, web_port = pick_port(7077), pick_port(8080)
    cluster = SparkStandalone(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}")
    master.start(
        [spark_class, MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)],
        port=port,
        env=env,
        ready=lambda: cluster.status()["status"] == "ALIVE",
        timeout=90,
        die_with_parent=die_with_parent,
    )
    worker_web_port = pick_port(8081)
    worker.start(
        [
            spark_class, WORKER_CLASS, "--host", "127.0.0.1", "--webui-port", str(worker_web_port),
            "--cores", str(cores), "--memory", memory, "--work-dir", str(worker.data_dir), cluster.master_url,
        ],
        port=worker_web_port,
        env=env,
        ready=lambda: cluster.status()["aliveworkers"] >= 1,
        timeout=90,
        die_with_parent=die_with_parent,
    )
    return cluster
