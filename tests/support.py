"""Helpers shared by tests (not fixtures: those are in conftest.py)."""

from __future__ import annotations

import json
import threading
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


class SecretWatch:
    """Where ``secret`` shows that it must not: a command line of any process on this machine while the
    block runs (``/proc/*/cmdline``, which every user may read: spark-submit and its JVM live only as
    long as the spark task), and, for a DAG run, each task's log, rendered fields and XComs. A secret
    belongs in a process's environment or a connection, nowhere else (docs/deploying.md, "Security")::

        with SecretWatch(secret) as watch:
            ...run the DAG...
        assert watch.exposures(api, dag_id, run_id) == []
    """

    def __init__(self, secret: str, every_s: float = 0.2):
        self.secret = secret
        self.every_s = every_s  # a spark-submit lives for seconds; each look reads every process's cmdline
        self.command_lines: dict[int, str] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._look, name="secret-watch", daemon=True)

    def __enter__(self) -> "SecretWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _look(self) -> None:
        needle = self.secret.encode()
        while True:
            for entry in Path("/proc").iterdir():
                try:
                    line = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
                except OSError:  # gone meanwhile
                    continue
                if needle in line:
                    self.command_lines[int(entry.name)] = line.replace(b"\0", b" ").decode(errors="replace")
            if self._done.wait(self.every_s):
                return

    def exposures(self, api, dag_id: str, run_id: str) -> list[str]:
        """Each place the secret showed: the command lines seen, then the run's task logs (every try),
        rendered fields and XComs, read over Airflow's REST API (``api``: an AirflowApi)."""
        found = [f"the command line of process {pid}: {line[:300]}" for pid, line in sorted(self.command_lines.items())]
        for ti in api.task_instances(dag_id, run_id):
            task = ti["task_id"]
            if self.secret in json.dumps(api.task_instance(dag_id, run_id, task)["rendered_fields"]):
                found.append(f"the rendered fields of {task}")
            for attempt in range(1, ti["try_number"] + 1):
                # A try that never started (a loaded machine's) has no log; a log file of it would be on disk.
                content = api.task_log_content(dag_id, run_id, task, attempt, ti["map_index"], missing_ok=True)
                if self.secret in json.dumps(content):
                    found.append(f"the log of {task}, try {attempt}")
        found += [f"XCom {key!r} of {task}" for (task, key), value in api.xcom_values(dag_id, run_id).items()
                  if self.secret in json.dumps(value)]
        return found
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
