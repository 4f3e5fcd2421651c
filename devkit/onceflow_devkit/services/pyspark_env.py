"""A second PySpark, of the Spark line Iceberg's newest runtime is built for, in a venv of its own:
the engine that reads the tables onceflow commits beside pyiceberg (``services.spark_table_reader``).

Iceberg 1.12.0's Spark runtime has no build for Spark 4.2, the line the project pins, and its 4.1
build does not load into PySpark 4.2.0 (docs/iceberg.md, "Querying the table"). So this venv holds
PySpark 4.1 alone, pinned exactly, and the runtime jar Maven fetches (``services.spark_iceberg``).

- **Where**: ``<cache>/pyspark-<version>-py<X.Y>/`` (``services.jars.cache_root``: outside the
  repository, so ``make clean`` keeps it), made from the interpreter that asks for it.
- **Once**: a stamp (``env.json``) written last says it is whole and names its python and jars; a
  lock keeps two sessions from making it at once; a failed make leaves no stamp and starts over.

``python -m onceflow_devkit.services.pyspark_env`` makes it, or says where it is.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from onceflow_devkit.services import spark_iceberg
from onceflow_devkit.services.jars import cache_root, made_once
from onceflow_devkit.services.process import ServiceError

PYSPARK = "4.1.4"  # the newest 4.1 release on PyPI
# Exactly what pip installs for it, so a second machine gets the same environment.
REQUIREMENTS = (f"pyspark=={PYSPARK}", "py4j==0.10.9.9")
SPARK_LINE = PYSPARK.rsplit(".", 1)[0]  # the Iceberg runtime's line is the PySpark's


@dataclass(frozen=True)
class PySparkEnv:
    python: Path  # the venv's interpreter: run a PySpark program with it
    jars: tuple[Path, ...]  # for the session's spark.jars
    pyspark: str
    seconds_to_make: float

    def to_json(self) -> str:
        return json.dumps({"python": str(self.python), "jars": [str(j) for j in self.jars], "pyspark": self.pyspark,
                           "seconds_to_make": self.seconds_to_make})

    @classmethod
    def from_json(cls, text: str) -> "PySparkEnv":
        raw = json.loads(text)
        return cls(Path(raw["python"]), tuple(Path(j) for j in raw["jars"]), raw["pyspark"], raw["seconds_to_make"])


def home(version: str = PYSPARK) -> Path:
    return cache_root() / f"pyspark-{version}-py{sys.version_info.major}.{sys.version_info.minor}"


def existing(version: str = PYSPARK) -> PySparkEnv | None:
    """The environment if it was made (nothing is fetched): for readers that are optional."""
    stamp = home(version) / "env.json"
    if not stamp.exists():
        return None
    env = PySparkEnv.from_json(stamp.read_text())
    return env if env.python.exists() and all(j.exists() for j in env.jars) else None


def pyspark_env(version: str = PYSPARK) -> PySparkEnv:
    """The environment, made on first use (pip from PyPI, the runtime jar from Maven Central)."""
    where = home(version)

    def make() -> PySparkEnv:
        started = time.monotonic()
        venv = where / "venv"
        shutil.rmtree(venv, ignore_errors=True)  # a make that died half way
        _run([sys.executable, "-m", "venv", str(venv)], "creating the venv")
        python = venv / "bin" / "python"
        _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q", *REQUIREMENTS],
             f"installing {' '.join(REQUIREMENTS)} from PyPI")
        jar = spark_iceberg.runtime_jar(spark_line=SPARK_LINE)
        env = PySparkEnv(python, (jar,), version, round(time.monotonic() - started, 1))
        (where / "env.json").write_text(env.to_json() + "\n")
        return env

    return made_once(where, lambda: existing(version), make)


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise ServiceError(f"the PySpark {PYSPARK} environment: {what} failed (`{' '.join(argv)}`):\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")


if __name__ == "__main__":
    made = pyspark_env()
    print(f"onceflow setup: PySpark {made.pyspark} with Iceberg's Spark {SPARK_LINE} runtime: {made.python} "
          f"(made in {made.seconds_to_make} s)")
