"""Where a benchmark's Python time goes: py-spy samples of its process tree, by category.

    with PythonProfile(Path("onceflow-0.txt")):
        ...                                   # the driver, and Spark's Python workers under its JVM
    seconds = categorized(Path("onceflow-0.txt"))

py-spy samples every Python process under this one (``--subprocesses``:
the driver, Spark's Python workers forked by its JVM) ``RATE`` times a
second without stopping them, and leaves out threads waiting in the kernel
(a flush waiting for acknowledgements, a worker waiting for its next batch).
A sample is charged to the first category of ``CATEGORIES`` a frame of its
stack matches, innermost frame first; the JVM's own CPU is not sampled
(``quiet.CpuMeter`` counts it). Profiled runs take CPU for py-spy: their
wall times are not the benchmark's figures.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

RATE = 100  # samples per second and thread
# (category, pattern of one frame "function (file:line)"), innermost frames are tried first.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("Kafka output: staged copy (Arrow IPC, SHA-256, file)", r"onceflow/sinks/kafka/staged\.py|onceflow/storage/digesting\.py"),
    ("Kafka output: choosing partitions", r"onceflow/sinks/kafka/partitioners\.py"),
    # The plain job's producer function (spark_job.py) converts its Arrow batches itself: counted here.
    ("Kafka output: producing (confluent-kafka)", r"onceflow/sinks/kafka/producing\.py|^produce_partition \(.*spark_job\.py"),
    ("Kafka output: the writer's rest (Arrow to Python lists, headers, begin, flush)", r"onceflow/sinks/kafka/"),
    ("reading Kafka (onceflow's range source)", r"onceflow/kafka/reader\.py|onceflow/sources/"),
    ("file output (Parquet, staged)", r"onceflow/sinks/files/"),
    ("PySpark: Arrow batches to and from the JVM", r"pyspark/sql/pandas/serializers\.py|pyspark/serializers\.py"),
    # daemon.py forks each worker and runs gc.collect() in it after every task.
    ("PySpark workers: fork, imports, gc after each task", r"pyspark/worker\.py|pyspark/sql/worker/|pyspark/daemon\.py"),
    ("Spark driver (Python)", r"pyspark/sql/|py4j/|pyspark/core/"),
)
OTHER = "other"


class PythonProfile:
    """py-spy recording this process's tree into ``path`` (raw collapsed stacks) while the block runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> "PythonProfile":
        spy = Path(sys.executable).with_name("py-spy")
        self._spy = subprocess.Popen(
            [str(spy), "record", "--pid", str(os.getpid()), "--subprocesses", "--nonblocking", "--full-filenames",
             "--rate", str(RATE), "--format", "raw", "--output", str(self.path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # attached before the work starts
        if self._spy.poll() is not None:
            raise RuntimeError(f"py-spy could not attach: {self._spy.stderr.read().strip()}")
        return self

    def __exit__(self, *exc) -> None:
        self._spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        self._spy.wait(timeout=60)


def categorized(path: Path) -> Counter:
    """Seconds of sampled Python time per category (``CATEGORIES``, then ``OTHER``)."""
    compiled = [(name, re.compile(pattern)) for name, pattern in CATEGORIES]
    seconds: Counter = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        category = next((name for frame in reversed(frames) for name, pattern in compiled if pattern.search(frame)), OTHER)
        seconds[category] += int(count) / RATE
    return seconds
