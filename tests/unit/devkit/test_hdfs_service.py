"""The dev kit's HDFS without starting it: the pinned Hadoop is PySpark's, a missing Maven is
named with the fix, and a client's configuration names the cluster."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pyspark
import pytest

from onceflow_devkit.services import hdfs
from onceflow_devkit.services.process import ManagedProcess, ServiceError


def test_the_pinned_hadoop_is_the_one_pyspark_bundles():
    jars = Path(pyspark.__file__).parent / "jars"
    assert [jar.name for jar in jars.glob("hadoop-client-api-*.jar")] == [f"hadoop-client-api-{hdfs.VERSION}.jar"]
    assert f"<hadoop.version>{hdfs.VERSION}</hadoop.version>" in hdfs.POM.read_text()


def test_without_maven_the_start_fails_naming_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("ONCEFLOW_JAR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ServiceError, match=r"`mvn` is not on PATH: install Maven and a JDK 17\+ .*apt-get install maven"):
        hdfs.start_hdfs(ManagedProcess("nn", tmp_path / "nn"), ManagedProcess("dn", tmp_path / "dn"))


def test_the_client_configuration_names_the_namenode_and_one_replica(tmp_path):
    cluster = hdfs.HdfsCluster(ManagedProcess("nn", tmp_path / "nn"), ManagedProcess("dn", tmp_path / "dn"), 8020, 9870)
    conf_dir = cluster.write_client_config(tmp_path / "conf")

    def settings(site: str) -> dict[str, str]:
        root = ET.parse(conf_dir / site).getroot()
        return {prop.findtext("name"): prop.findtext("value") for prop in root.iter("property")}

    assert settings("core-site.xml") == {"fs.defaultFS": "hdfs://127.0.0.1:8020"}
    assert settings("hdfs-site.xml")["dfs.replication"] == "1"
