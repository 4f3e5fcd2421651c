"""Spark's own Kafka connector (``spark.read.format("kafka")``) for the PySpark installed here,
from jars Maven fetches (``devkit/spark-kafka/pom.xml``): what users would pick instead of
onceflow's range reader, for the benchmarks that compare the two."""

from __future__ import annotations

from pathlib import Path

from onceflow_devkit.services.jars import DEVKIT, INSTALL_HINT, fetch_jars

POM = DEVKIT / "spark-kafka" / "pom.xml"


def pyspark_version() -> str:
    import pyspark

    return pyspark.__version__


def _drop_what_pyspark_ships(libs: Path) -> None:
    import pyspark

    shipped = {jar.name for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    stems = {name.rsplit("-", 1)[0] for name in shipped}
    for jar in libs.glob("*.jar"):  # another version of a jar PySpark ships would shadow or clash with it
        if jar.name in shipped or jar.name.rsplit("-", 1)[0] in stems:
            jar.unlink()


def connector_jars(version: str | None = None) -> list[Path]:
    """The jars to add to a Spark session (``spark.jars``) for Spark ``version``'s Kafka source."""
    version = version or pyspark_version()
    libs = fetch_jars(f"spark-kafka-{version}", POM, {"spark.version": version}, expect="spark-sql-kafka-*.jar",
                      what=f"Spark's Kafka connector {version}", install_hint=INSTALL_HINT,
                      prepare=_drop_what_pyspark_ships)
    return sorted(libs.glob("*.jar"))
