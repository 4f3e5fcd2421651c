"""A local SparkSession whose Python workers run this interpreter.

Runs in the driver: a test, ``onceflow demo``, or a job under spark-submit
(where the session already exists and ``getOrCreate`` returns it).
"""

from __future__ import annotations

import os
import sys


# A local Spark on 127.0.0.1 without its web UI, in UTC (also the dev kit's Spark Connect server's).
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
}


def local_spark(app_name: str = "onceflow", master: str = "local[2]", **conf: str):
    # Spark's Python workers otherwise run the first python3 on PATH, which
    # is not the venv's and lacks pyarrow and onceflow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The machine name may resolve to a non-loopback address; stay on 127.0.0.1.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**LOCAL_CONF, **conf}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
