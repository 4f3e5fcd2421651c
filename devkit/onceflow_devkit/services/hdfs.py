"""HDFS on 127.0.0.1: a NameNode and a DataNode of Apache Hadoop, each its own JVM.

- **Jars**: ``devkit/hdfs/pom.xml`` names Hadoop's shaded server jar (hadoop-client-minicluster)
  at the Hadoop version of the client PySpark bundles; fetched once (``services.jars``).
- **Daemons**: ``NameNode`` (its namespace formatted once) and ``DataNode`` start side by side,
  each a ManagedProcess with its own heap, configuration and data, as on a cluster: a test can
  kill either. Hadoop's MiniDFSClusterManager would run both in one JVM, and needs JUnit, which
  its jar leaves out. Ready when the NameNode has left safe mode with a live DataNode.
- **Clients**: full ``hdfs://127.0.0.1:<port>/...`` URIs (``HdfsCluster.uri``), or the
  core-site.xml/hdfs-site.xml that ``write_client_config`` writes (a ``HADOOP_CONF_DIR``).

7 to 11 s to ready on 2 cores busy with other work; of it, the NameNode's WebHDFS scans Hadoop's
jars at every start (2 to 4 s), which no setting of Hadoop 3.5 turns off.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping
from xml.sax.saxutils import escape

from onceflow_devkit.services.jars import DEVKIT, INSTALL_HINT, SMALL_JVM, fetch_jars
from onceflow_devkit.services.process import ManagedProcess, ServiceError, free_ports, held_by_session, pick_port

VERSION = "3.5.0"  # PySpark's: pyspark/jars/hadoop-client-api-<version>.jar
POM = DEVKIT / "hdfs" / "pom.xml"
NAMENODE_CLASS = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE_CLASS = "org.apache.hadoop.hdfs.server.datanode.DataNode"
HEAPS = {NAMENODE_CLASS: "256m", DATANODE_CLASS: "192m"}
# At INFO per operation, per block or per block directory (a thousand lines a start): the log would be little else.
QUIET_LOGGERS = ("org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit", "org.apache.hadoop.hdfs.StateChange",
                 "BlockStateChange", "org.apache.hadoop.hdfs.server.datanode.DataNode.clienttrace",
                 "org.apache.hadoop.hdfs.server.datanode.fsdataset.impl.FsDatasetImpl",
                 "org.apache.hadoop.ipc.Client")  # each retry while the NameNode starts


def _unpack_webapps(libs: Path) -> None:
    # Jetty copies a web app out of its jar at every start, inflating all 56 MB of it (5 s);
    # from a directory on the classpath it starts at once.
    (jar,) = libs.glob("hadoop-client-minicluster-*.jar")
    with zipfile.ZipFile(jar) as archive:
        archive.extractall(libs, [name for name in archive.namelist() if name.startswith("webapps/")])


def fetch(version: str = VERSION) -> Path:
    """The directory of Hadoop ``version``'s jars (and web apps), fetched by Maven on first use."""
    return fetch_jars(f"hadoop-{version}", POM, {"hadoop.version": version}, expect="hadoop-client-minicluster-*.jar",
                      what=f"HDFS (Apache Hadoop {version})", install_hint=INSTALL_HINT, prepare=_unpack_webapps)


def site_xml(settings: Mapping[str, str]) -> str:
    properties = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                         for k, v in settings.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{properties}</configuration>\n'


@dataclass(frozen=True)
class HdfsCluster:
    namenode: ManagedProcess
    datanode: ManagedProcess
    rpc_port: int
    http_port: int

    @property
    def uri(self) -> str:
        return f"hdfs://127.0.0.1:{self.rpc_port}"

    def client_settings(self) -> dict[str, str]:
        """What a client of this cluster sets: its default filesystem, and one replica (one DataNode)."""
        return {
            "fs.defaultFS": self.uri,
            "dfs.replication": "1",
            # Closing a file polls the NameNode until the DataNode has reported the block: from 20 ms on, not 400.
            "dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "20",
        }

    def write_client_config(self, directory: Path) -> Path:
        """``directory`` with the core-site.xml and hdfs-site.xml a client needs (a ``HADOOP_CONF_DIR``)."""
        directory.mkdir(parents=True, exist_ok=True)
        settings = self.client_settings()
        (directory / "core-site.xml").write_text(site_xml({"fs.defaultFS": settings.pop("fs.defaultFS")}))
        (directory / "hdfs-site.xml").write_text(site_xml(settings))
        return directory

    def state(self) -> dict:
        """The NameNode's FSNamesystemState (its /jmx): FSState, NumLiveDataNodes, CapacityRemaining, ...;
        empty while the NameNode loads its namespace (its web server comes up first)."""
        query = "Hadoop:service=NameNode,name=FSNamesystemState"
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/jmx?qry={query}", timeout=2) as response:
            return next(iter(json.load(response)["beans"]), {})

    def ready(self) -> bool:
        """Out of safe mode, with a live DataNode that reported space: a client can write."""
        state = self.state()
        return (state.get("FSState") == "Operational" and state.get("NumLiveDataNodes", 0) >= 1
                and state.get("CapacityRemaining", 0) > 0)

    def stop(self, grace: float = 5) -> None:
        self.datanode.stop(grace=grace)
        self.namenode.stop(grace=grace)


def _daemon_settings(proc: ManagedProcess, cluster: HdfsCluster, datanode_port: int) -> dict[str, str]:
    return {
        "dfs.namenode.rpc-address": f"127.0.0.1:{cluster.rpc_port}",
        "dfs.namenode.http-address": f"127.0.0.1:{cluster.http_port}",
        "dfs.namenode.name.dir": str(cluster.namenode.data_dir / "name"),
        "dfs.datanode.address": f"127.0.0.1:{datanode_port}",
        "dfs.datanode.http.address": "127.0.0.1:0",
        "dfs.datanode.ipc.address": "127.0.0.1:0",
        "dfs.datanode.data.dir": str(cluster.datanode.data_dir / "blocks"),
        "dfs.namenode.datanode.registration.ip-hostname-check": "false",
        "dfs.namenode.safemode.extension": "0",  # a restart serves at once once its blocks are reported
        "dfs.heartbeat.interval": "1",  # the DataNode's first report of its space, and so readiness, comes sooner
        # The DataNode reaches the NameNode that starts beside it at the first 0.2 s try after, not 1 s.
        "ipc.client.connect.retry.interval": "200",
        "ipc.client.connect.max.retries": "150",
        "hadoop.tmp.dir": str(proc.data_dir / "tmp"),
        **cluster.client_settings(),
    }


def _write_config(proc: ManagedProcess, cluster: HdfsCluster, datanode_port: int) -> Path:
    """The daemon's configuration directory (on its classpath): both sites and its logging."""
    conf = proc.directory / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    settings = _daemon_settings(proc, cluster, datanode_port)
    (conf / "core-site.xml").write_text(site_xml({k: settings.pop(k) for k in ("fs.defaultFS", "hadoop.tmp.dir")}))
    (conf / "hdfs-site.xml").write_text(site_xml(settings))
    (conf / "log4j.properties").write_text(
        "log4j.rootLogger=INFO, console\n"
        "log4j.appender.console=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.console.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.console.layout.ConversionPattern=%d %p %c{1}: %m%n\n"
        + "".join(f"log4j.logger.{name}=WARN\n" for name in QUIET_LOGGERS)
    )
    return conf


def _java(libs: Path, proc: ManagedProcess, conf: Path, main: str, *args: str) -> list[str]:
    if shutil.which("java") is None:
        raise ServiceError(f"HDFS needs `java` on PATH: {INSTALL_HINT}")
    return ["java", "-Xms32m", f"-Xmx{HEAPS[main]}", *SMALL_JVM, "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}", f"-Dhadoop.log.dir={proc.directory}",
            "-cp", f"{conf}:{libs}:{libs}/*", main, *args]


def _format_once(libs: Path, namenode: ManagedProcess, conf: Path) -> None:
    """A new namespace unless the NameNode has one (a restart keeps the files)."""
    if (namenode.data_dir / "name" / "current" / "VERSION").exists():
        return
    argv = _java(libs, namenode, conf, NAMENODE_CLASS, "-format", "-nonInteractive")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=namenode.directory)
    if done.returncode != 0:
        raise ServiceError(f"formatting the HDFS NameNode's storage failed:\n{(done.stdout + done.stderr)[-3000:]}")


def _await_ready(cluster: HdfsCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for proc in (cluster.namenode, cluster.datanode):
            if proc.running_pid() is None:
                cluster.stop(grace=2)
                raise ServiceError(f"{proc.name} exited during start-up; log {proc.log_file}:\n{proc.log_tail()}")
        try:
            if cluster.ready():
                break
        except OSError:  # not serving yet
            pass
        if time.monotonic() > deadline:
            cluster.stop(grace=2)
            raise ServiceError(f"HDFS was not ready after {timeout:.0f} s; log {cluster.namenode.log_file}:\n"
                               f"{cluster.namenode.log_tail()}\n{cluster.datanode.log_file}:\n{cluster.datanode.log_tail()}")
        time.sleep(0.2)
    if held_by_session(cluster.rpc_port, cluster.namenode.running_pid()) is False:
        cluster.stop(grace=2)
        raise ServiceError(f"HDFS: port {cluster.rpc_port} answers, but not from the NameNode just started: another "
                           "service took the port first. Start again: a free port is picked")


def start_hdfs(namenode: ManagedProcess, datanode: ManagedProcess, version: str = VERSION,
               die_with_parent: bool = False, timeout: float = 90) -> HdfsCluster:
    """Start a NameNode and a DataNode, their data in ``namenode``'s and ``datanode``'s directories
    (a restart keeps it), and wait until a client can write."""
    libs = fetch(version)
    rpc = pick_port(namenode.port())  # the same port again on a restart, when it is free
    http, datanode_port = [port for port in free_ports(3) if port != rpc][:2]
    cluster = HdfsCluster(namenode, datanode, rpc, http)
    namenode_conf, datanode_conf = (_write_config(proc, cluster, datanode_port) for proc in (namenode, datanode))
    # The DataNode first: it starts while the namespace is formatted, and retries until the NameNode answers.
    datanode.start(_java(libs, datanode, datanode_conf, DATANODE_CLASS), port=datanode_port, ready=lambda: True,
                   die_with_parent=die_with_parent)
    try:
        _format_once(libs, namenode, namenode_conf)
        namenode.start(_java(libs, namenode, namenode_conf, NAMENODE_CLASS), port=rpc, ready=lambda: True,
                       die_with_parent=die_with_parent)
    except BaseException:
        datanode.stop(grace=2)
        raise
    _await_ready(cluster, timeout)  # readiness is the cluster's
    return cluster


if __name__ == "__main__":  # tools/bootstrap.sh: fetch now, so the first test does not
    print(f"onceflow setup: HDFS (Apache Hadoop {VERSION}) jars in {fetch()}")
