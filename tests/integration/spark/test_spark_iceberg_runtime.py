"""Whether Spark's own Iceberg reader runs beside the PySpark onceflow pins: the smoke test that
decides if a Spark session can read the committed tables (docs/limits.md says it cannot yet).

The session needs the runtime jar at start (``spark.jars``), which the session fixture ``spark``
has not, so it runs in a Python process of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pyarrow as pa
import pytest

from onceflow.sinks.iceberg import tables
from onceflow_devkit.services.iceberg_catalog import CONN_ID
from onceflow_devkit.services.spark_iceberg import SPARK_LINE, catalog_conf, runtime_jar

READER = """
import json, sys
from onceflow.spark.local_session import local_spark
conf, table = json.loads(sys.argv[1]), sys.argv[2]
spark = local_spark("iceberg-runtime-smoke", **conf)
try:
    print(json.dumps(sorted(r.i for r in spark.sql(f"SELECT i FROM {table}").collect())))
finally:
    spark.stop()
"""


@pytest.mark.slow
def test_the_spark_4_1_iceberg_runtime_does_not_load_into_pyspark_4_2_as_limits_md_says(rest_catalog):
    """When this fails, the runtime loads: build the Spark reader of the committed tables
    (issue 59) and correct docs/limits.md and docs/iceberg.md."""
    import pyspark

    identifier = f"ns_{uuid.uuid4().hex[:6]}.smoke"
    catalog = tables.open_catalog(CONN_ID, rest_catalog.properties())
    table = tables.prepared_table(catalog, identifier, pa.schema([("i", pa.int64())]), (), "smoke table")
    table.append(pa.table({"i": [1, 2, 3]}))
    conf = {"spark.jars": str(runtime_jar()), **catalog_conf("lake", rest_catalog.properties())}
    done = subprocess.run([sys.executable, "-c", READER, json.dumps(conf), f"lake.{identifier}"],
                          capture_output=True, text=True, timeout=300)
    assert pyspark.__version__.startswith("4.2.") and SPARK_LINE == "4.1", "the versions this test is about changed"
    assert done.returncode != 0, f"Spark read the table ({done.stdout.strip()}): the limit is gone"
    assert ("IncompatibleClassChangeError: class org.apache.iceberg.spark.source.SparkView can not implement "
            "org.apache.spark.sql.connector.catalog.View, because it is not an interface") in done.stderr, done.stderr[-3000:]
