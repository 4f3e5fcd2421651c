"""Iceberg's Spark runtime (``org.apache.iceberg.spark.SparkCatalog``), from the jar Maven fetches
(``devkit/spark-iceberg/pom.xml``): Spark as a second reader of the tables onceflow commits.

Iceberg builds its runtime per Spark line; 1.12.0 has none for Spark 4.2, and its 4.1 build does
not load into PySpark 4.2.0 (docs/iceberg.md, "Querying the table").
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from onceflow_devkit.services.jars import DEVKIT, INSTALL_HINT, fetch_jars

POM = DEVKIT / "spark-iceberg" / "pom.xml"
VERSION = "1.12.0"
SPARK_LINE = "4.1"  # the newest line Iceberg 1.12.0 is built for


def runtime_jar(version: str = VERSION, spark_line: str = SPARK_LINE) -> Path:
    """The runtime jar (one shaded jar) to add to a Spark session's ``spark.jars``."""
    libs = fetch_jars(f"spark-iceberg-{spark_line}-{version}", POM, {"iceberg.version": version, "spark.line": spark_line},
                      expect="iceberg-spark-runtime-*.jar", what=f"Iceberg's Spark {spark_line} runtime {version}",
                      install_hint=INSTALL_HINT)
    (jar,) = libs.glob("iceberg-spark-runtime-*.jar")
    return jar


def catalog_conf(name: str, properties: Mapping[str, str]) -> dict[str, str]:
    """Spark settings of catalog ``name`` from its pyiceberg ``properties`` (a REST catalog's take the same keys)."""
    return {f"spark.sql.catalog.{name}": "org.apache.iceberg.spark.SparkCatalog",
            **{f"spark.sql.catalog.{name}.{key}": value for key, value in properties.items()}}
