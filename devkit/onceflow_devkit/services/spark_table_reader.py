"""Spark reads a table onceflow committed, as a user's Spark job would: Iceberg's ``SparkCatalog``
on the same REST catalog, in the second PySpark (``services.pyspark_env``, Spark 4.1), so the
caller keeps the PySpark the project pins.

    read_table(properties, "ns.table", as_of=[snapshot id]) -> SparkRead
    compact_table(properties, "ns.table") -> SparkRead   # rewrite_data_files, then the same read

runs ``services/spark_table_read.py`` with that environment's interpreter in a process of its own
(a local[1] session, about 20 s on 2 cores) and returns what it read as plain data. A compaction
and the read after it share one session: the JVM's start is most of the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from onceflow_devkit.services.process import ServiceError
from onceflow_devkit.services.pyspark_env import PySparkEnv, pyspark_env
from onceflow_devkit.services.spark_iceberg import catalog_conf

PROGRAM = Path(__file__).with_name("spark_table_read.py")
CATALOG = "lake"  # the Spark catalog's name in the session
# The caller's Spark, Python path and interpreters must not reach the other PySpark.
_NOT_INHERITED = ("SPARK_HOME", "SPARK_CONF_DIR", "PYTHONPATH", "PYTHONHOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                  "PYSPARK_SUBMIT_ARGS", "VIRTUAL_ENV")


@dataclass(frozen=True)
class SparkRead:
    rows: list[dict[str, Any]]  # the current snapshot's rows
    snapshots: list[dict[str, Any]]  # snapshot_id, parent_id, operation, summary, committed_at; oldest first
    as_of: dict[int, list[dict[str, Any]]]  # rows read VERSION AS OF each snapshot id asked for
    pyspark: str
    rewrite: dict[str, Any] | None = None  # rewrite_data_files' result row (rewritten_data_files_count...)


def read_table(properties: Mapping[str, str], identifier: str, as_of: Iterable[int] = (),
               env: PySparkEnv | None = None, timeout: float = 600) -> SparkRead:
    """Table ``identifier`` (``namespace.table``) of the REST catalog of pyiceberg ``properties``, read
    by Spark: its rows, its snapshots, and its rows as of each snapshot id in ``as_of``."""
    return _run(properties, identifier, {"as_of": [int(s) for s in as_of]}, env, timeout, "read")


def compact_table(properties: Mapping[str, str], identifier: str, env: PySparkEnv | None = None,
                  timeout: float = 600) -> SparkRead:
    """Every data file of table ``identifier`` rewritten by Spark's ``rewrite_data_files`` procedure
    (one ``replace`` snapshot, as another writer's compaction job makes), then the table read as
    ``read_table`` does."""
    return _run(properties, identifier, {"as_of": [], "rewrite": True}, env, timeout, "compact")


def _run(properties: Mapping[str, str], identifier: str, asks: Mapping[str, Any], env: PySparkEnv | None,
         timeout: float, what: str) -> SparkRead:
    if properties.get("type") != "rest":
        raise ServiceError(f"Spark reads through a REST catalog here, not a catalog of type {properties.get('type')!r}")
    env = env or pyspark_env()
    request = {"catalog": catalog_conf(CATALOG, properties), "jars": [str(j) for j in env.jars],
               "table": f"{CATALOG}.{identifier}", **asks}
    with tempfile.TemporaryDirectory(prefix="spark-table-read-") as scratch:
        asked, answered = Path(scratch) / "request.json", Path(scratch) / "answer.json"
        asked.write_text(json.dumps(request))
        done = subprocess.run([str(env.python), str(PROGRAM), str(asked), str(answered)], capture_output=True,
                              text=True, timeout=timeout, env=_environment(env), cwd=scratch)
        if done.returncode != 0 or not answered.exists():
            raise ServiceError(f"Spark {env.pyspark} could not {what} table {identifier} (exit {done.returncode}):\n"
                               f"{done.stderr[-3000:]}")
        answer = json.loads(answered.read_text())
    return SparkRead(answer["rows"], answer["snapshots"], {int(k): v for k, v in answer["as_of"].items()}, env.pyspark,
                     answer.get("rewrite"))


def _environment(env: PySparkEnv) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    return {**inherited, "PYSPARK_PYTHON": str(env.python), "SPARK_LOCAL_IP": "127.0.0.1", "TZ": "UTC"}
