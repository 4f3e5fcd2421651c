"""Apache Kafka itself, run from its jars, as a broker of the dev kit.

noida-db and Tansu speak the Kafka protocol but are not Kafka (kafka_broker's
capabilities list where they differ); this module runs the real broker, so
tests can also hold onceflow to what Apache Kafka does.

- **Jars**: ``devkit/kafka/pom.xml`` names ``kafka_2.13`` and the logging backend
  its POM leaves out; Maven copies them once into ``~/.cache/onceflow/kafka-<version>/libs``
  (``services.jars``), so later sessions start at once.
- **A node**: KRaft, broker and controller in one JVM on 127.0.0.1, a static
  ``controller.quorum.voters`` (the same format on Kafka 3.9 and 4.x) and its
  storage formatted once: a restart (SIGKILL included) keeps records and
  open transactions. Its settings live in ``<service dir>/node.json``.
- **A cluster**: ``start_apache_cluster`` runs 3 such nodes, each its own
  ManagedProcess (a test kills, restarts or SIGSTOPs one), with replication
  factor 3 and min.insync.replicas 2.
- **Secured** (``secure=True``): SASL_SSL with SCRAM users and the ACL authorizer
  (``kafka_security``); the credentials live beside the nodes' directories.

Small heap, serial GC and the C1 compiler only: a node starts in a few seconds
on 2 cores and takes a few hundred MB.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Mapping

from onceflow_devkit.services.jars import DEVKIT, SMALL_JVM, fetch_jars
from onceflow_devkit.services.kafka_security import ADMIN, Security, secure as secured_in
from onceflow_devkit.services.process import ManagedProcess, ServiceError, free_ports, pick_port, port_is_free, write_private

VERSIONS = {"apache": "4.4.0", "apache-3.9": "3.9.2"}
POM = DEVKIT / "kafka" / "pom.xml"
JVM_OPTS = ["-Xms64m", "-Xmx512m", *SMALL_JVM]
# Kafka's defaults for these three, named so a test can shorten them (``settings=``).
DEFAULT_SETTINGS = {
    "transaction.max.timeout.ms": "900000",
    "transactional.id.expiration.ms": "604800000",
    "producer.id.expiration.ms": "86400000",
}
INSTALL_HINT = ("install Maven and a JDK 17+ (Debian/Ubuntu: apt-get install maven openjdk-17-jdk-headless), "
                "or choose an embedded broker instead (ONCEFLOW_TEST_BROKERS=noida, `onceflow services up` uses noida)")


def is_3x(version: str) -> bool:
    return version.split(".")[0] == "3"


def fetch(version: str) -> Path:
    """The directory of Kafka ``version``'s jars, fetched by Maven on first use."""
    return fetch_jars(f"kafka-{version}", POM, {"kafka.version": version,
                                                "kafka.logging": "reload4j" if is_3x(version) else "log4j2"},
                      expect="kafka_2.13-*.jar", what=f"Apache Kafka {version}", install_hint=INSTALL_HINT)


@dataclass
class NodeSpec:
    """Everything a node's configuration derives from; saved as ``node.json`` in its service directory."""

    version: str
    node_id: int
    port: int
    controller_port: int
    voters: str  # controller.quorum.voters: id@127.0.0.1:port,...
    cluster_id: str
    replication: int = 1
    settings: dict[str, str] = field(default_factory=dict)
    # The directory of the cluster's credentials (``kafka_security``); None: PLAINTEXT, no authorizer.
    security: str | None = None

    @property
    def secured(self) -> Security | None:
        return Security(self.security) if self.security else None

    def client_config(self) -> dict[str, str]:
        """The dev kit admin's settings for this node (none on PLAINTEXT)."""
        return self.secured.client_config(ADMIN) if self.secured else {}

    def properties(self, data_dir: Path) -> dict[str, str]:
        r, isr = str(self.replication), str(min(2, max(1, self.replication - 1)))
        secured = self.secured.listeners(self.port, self.controller_port) if self.secured else {}
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(data_dir / "log"),
            "num.partitions": "1",
            "default.replication.factor": r,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": r,
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": r,
            "transaction.state.log.min.isr": isr,
            "transaction.state.log.num.partitions": "10",
            "share.coordinator.state.topic.replication.factor": r,
            "share.coordinator.state.topic.min.isr": isr,
            "group.initial.rebalance.delay.ms": "0",
            # A SIGKILLed node's old registration blocks its restart until its session times out (9 s by default).
            "broker.session.timeout.ms": "4000",
            "broker.heartbeat.interval.ms": "1000",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
            **DEFAULT_SETTINGS,
            **secured,
            **self.settings,
        }


def _write_config(proc: ManagedProcess, spec: NodeSpec) -> Path:
    proc.data_dir.mkdir(parents=True, exist_ok=True)
    (proc.directory / "node.json").write_text(json.dumps(asdict(spec), indent=2))
    server = proc.directory / "server.properties"
    # Secured, it holds the node's own password: readable by its owner only.
    write_private(server, "".join(f"{k}={v}\n" for k, v in spec.properties(proc.data_dir).items()))
    log = proc.data_dir / "kafka.log"
    if is_3x(spec.version):  # log4j 1.x (reload4j)
        (proc.directory / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, file, console\n"
            "log4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={log}\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.appender.console=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.console.Threshold=WARN\n"
            "log4j.appender.console.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.console.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.logger.kafka.request.logger=WARN\n"
            "log4j.logger.org.apache.kafka.raft=WARN\n"
        )
    else:  # log4j 2
        (proc.directory / "log4j2.properties").write_text(
            "appender.file.type=File\nappender.file.name=file\n"
            f"appender.file.fileName={log}\n"
            "appender.file.layout.type=PatternLayout\nappender.file.layout.pattern=[%d] %p %m (%c)%n\n"
            "appender.console.type=Console\nappender.console.name=console\n"
            "appender.console.layout.type=PatternLayout\nappender.console.layout.pattern=[%d] %p %m (%c)%n\n"
            "appender.console.filter.threshold.type=ThresholdFilter\nappender.console.filter.threshold.level=WARN\n"
            "rootLogger.level=INFO\nrootLogger.appenderRef.file.ref=file\nrootLogger.appenderRef.console.ref=console\n"
            "logger.request.name=kafka.request.logger\nlogger.request.level=WARN\n"
            "logger.raft.name=org.apache.kafka.raft\nlogger.raft.level=WARN\n"
        )
    return server


def _java(spec: NodeSpec, proc: ManagedProcess, main: str, *args: str) -> list[str]:
    libs = fetch(spec.version)
    if shutil.which("java") is None:
        raise ServiceError(f"Apache Kafka needs `java` on PATH: {INSTALL_HINT}")
    logging = (f"-Dlog4j.configuration=file:{proc.directory / 'log4j.properties'}" if is_3x(spec.version)
               else f"-Dlog4j2.configurationFile={proc.directory / 'log4j2.properties'}")
    return ["java", *JVM_OPTS, logging, "-cp", f"{libs}/*", main, *args]


def _format_once(proc: ManagedProcess, spec: NodeSpec, server: Path) -> None:
    """Format the node's storage unless it already is (a restart keeps records and open transactions)."""
    if (proc.data_dir / "log" / "meta.properties").exists():
        return
    users = []
    if spec.secured:  # the SCRAM users, from a file the tool reads (@file): no password on a command line
        arguments = proc.directory / "scram.args"
        write_private(arguments, spec.secured.scram_arguments())
        users = [f"@{arguments}"]
    argv = _java(spec, proc, "kafka.tools.StorageTool", "format", "-t", spec.cluster_id, "-c", str(server),
                 "--ignore-formatted", *users)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=proc.directory)
    finally:
        if users:
            arguments.unlink(missing_ok=True)
    if done.returncode != 0:
        # The tool prints the bootstrap records, the users' salted credentials among them: not those.
        said = "\n".join(line for line in (done.stdout + done.stderr).splitlines() if "Scram" not in line)
        raise ServiceError(f"formatting Apache Kafka's storage failed:\n{said[-3000:]}")


def answers(bootstrap: str, node_id: int | None = None, config: Mapping[str, str] | None = None) -> bool:
    """Whether the broker at ``bootstrap`` serves metadata (naming itself, when ``node_id`` is given);
    ``config``: the client settings it asks with (a secured node's admin)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**(config or {}), "bootstrap.servers": bootstrap, "socket.timeout.ms": 1000, "log_level": 0})
    brokers = admin.list_topics(timeout=2).brokers
    return bool(brokers) and (node_id is None or node_id in brokers)


def launch(proc: ManagedProcess, spec: NodeSpec, die_with_parent: bool = False, timeout: float = 90,
           wait: bool = True) -> int:
    """Write the node's configuration, format its storage once, start it and (``wait``) wait until it answers."""
    server = _write_config(proc, spec)
    _format_once(proc, spec, server)
    # A node killed just before (ManagedProcess.stop does not wait for it) may hold its ports a moment longer.
    deadline = time.monotonic() + 15
    while not (port_is_free(spec.port) and port_is_free(spec.controller_port)) and time.monotonic() < deadline:
        time.sleep(0.1)
    argv = _java(spec, proc, "kafka.Kafka", str(server))
    ready = (lambda: answers(f"127.0.0.1:{spec.port}", spec.node_id, spec.client_config())) if wait else (lambda: True)
    return proc.start(argv, port=spec.port, ready=ready, timeout=timeout, die_with_parent=die_with_parent)


def _await_answers(nodes: list[tuple[ManagedProcess, NodeSpec]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    waiting = list(nodes)
    while waiting:
        for proc, spec in list(waiting):
            if proc.running_pid() is None:
                raise ServiceError(f"{proc.name} exited during start-up; log {proc.log_file}:\n{proc.log_tail()}")
            try:
                if answers(f"127.0.0.1:{spec.port}", spec.node_id, spec.client_config()):
                    waiting.remove((proc, spec))
            except Exception:  # not up yet
                pass
        if waiting and time.monotonic() > deadline:
            for proc, _ in nodes:
                proc.stop(grace=2)
            names = ", ".join(proc.name for proc, _ in waiting)
            raise ServiceError(f"{names} not ready after {timeout:.0f} s; log {waiting[0][0].log_file}:\n"
                               f"{waiting[0][0].log_tail()}")
        time.sleep(0.2)


def new_cluster_id() -> str:
    while True:  # Kafka's own Uuid.randomUuid skips ids that would read as a command-line option
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def saved_spec(proc: ManagedProcess) -> NodeSpec | None:
    try:
        return NodeSpec(**json.loads((proc.directory / "node.json").read_text()))
    except FileNotFoundError:
        return None


def start_node(proc: ManagedProcess, version: str, port: int, settings: Mapping[str, str] | None = None,
               die_with_parent: bool = False, secure: bool = False) -> NodeSpec:
    """Start (or restart, keeping data, controller port, settings and credentials) a single-node
    cluster; what it runs as. ``secure``: SASL_SSL and the ACL authorizer (``kafka_security``)."""
    spec = saved_spec(proc)
    if spec is None or spec.version != version or bool(spec.security) != secure:
        if spec is not None:  # another Kafka's data: start afresh
            shutil.rmtree(proc.data_dir, ignore_errors=True)
        controller = pick_port(None)
        security = secured_in(proc.directory / "security").directory if secure else None
        spec = NodeSpec(version, 1, port, controller, f"1@127.0.0.1:{controller}", new_cluster_id(), security=security)
    spec = replace(spec, port=port, settings=dict(settings) if settings is not None else spec.settings)
    launch(proc, spec, die_with_parent=die_with_parent)
    return spec


@dataclass
class ApacheCluster:
    """Three (``nodes``) combined broker+controller nodes; ``procs[i]`` runs node id ``i + 1``."""

    procs: list[ManagedProcess]
    die_with_parent: bool = False

    def spec(self, i: int) -> NodeSpec:
        return saved_spec(self.procs[i])

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.spec(i).port}" for i in range(len(self.procs)))

    def client_config(self) -> dict[str, str]:
        """The dev kit admin's settings (none on PLAINTEXT)."""
        return self.spec(0).client_config()

    def kill(self, i: int) -> None:
        self.procs[i].kill()

    def start(self, i: int) -> None:
        """Start node ``i`` again (after kill/stop): same ports and data, so it rejoins."""
        launch(self.procs[i], self.spec(i), die_with_parent=self.die_with_parent)

    @classmethod
    def at(cls, home: Path, die_with_parent: bool = False) -> "ApacheCluster":
        """The cluster ``start_apache_cluster`` started in ``home`` (running or not)."""
        nodes = sorted(Path(home).glob("kafka-*"), key=lambda d: int(d.name.rsplit("-", 1)[1]))
        return cls([ManagedProcess(d.name, d) for d in nodes], die_with_parent)

    def running(self) -> list[int]:
        """The indexes of the nodes whose process is alive."""
        return [i for i, proc in enumerate(self.procs) if proc.running_pid() is not None]

    def pids(self) -> list[int]:
        return [pid for pid in (proc.running_pid() for proc in self.procs) if pid is not None]

    def active_controller(self) -> int:
        """The index of the node that leads the KRaft metadata quorum now (DescribeQuorum)."""
        from kafka import KafkaAdminClient

        from onceflow.kafka.config import kafka_python_config

        settings = kafka_python_config({**self.client_config(), "bootstrap.servers": self.bootstrap})
        admin = KafkaAdminClient(**settings, request_timeout_ms=10_000)
        try:
            leader = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]["leader_id"]
        finally:
            admin.close()
        return leader - 1

    def restart_all(self, kill: bool = False) -> None:
        """Every node down (SIGKILL when ``kill``: a power loss), then all started at once: a quorum
        needs a majority before any node answers."""
        self.stop(kill=kill)
        for proc in self.procs:
            launch(proc, saved_spec(proc), self.die_with_parent, wait=False)
        _await_answers([(proc, saved_spec(proc)) for proc in self.procs], timeout=120)

    def restart(self, i: int, kill: bool = False) -> None:
        self.procs[i].end(kill)
        self.start(i)

    def stop(self, kill: bool = False) -> None:
        """Stop every node (the last ones wait for a quorum that is gone: ``kill`` when the data does not matter)."""
        for proc in self.procs:
            proc.end(kill, grace=5)


def start_apache_cluster(home: Path, nodes: int = 3, version: str = VERSIONS["apache"],
                         settings: Mapping[str, str] | None = None, die_with_parent: bool = False,
                         secure: bool = False) -> ApacheCluster:
    """Start a new cluster of ``nodes`` nodes in ``home/kafka-<id>/`` (whatever was there goes), all at
    once: a quorum needs a majority before any node answers. ``secure``: SASL_SSL and the ACL
    authorizer, the credentials in ``home/security/`` (``kafka_security``)."""
    fetch(version)
    procs = [ManagedProcess(f"kafka-{i + 1}", Path(home) / f"kafka-{i + 1}").reset() for i in range(nodes)]
    if secure:
        shutil.rmtree(Path(home) / "security", ignore_errors=True)
    security = secured_in(Path(home) / "security").directory if secure else None
    free = free_ports(2 * nodes)
    ports = list(zip(free[::2], free[1::2]))
    voters = ",".join(f"{i + 1}@127.0.0.1:{controller}" for i, (_, controller) in enumerate(ports))
    cluster_id = new_cluster_id()
    specs = [NodeSpec(version, i + 1, port, controller, voters, cluster_id, replication=min(nodes, 3),
                      settings=dict(settings or {}), security=security) for i, (port, controller) in enumerate(ports)]
    with ThreadPoolExecutor(nodes) as pool:  # formatting runs a JVM per node
        list(pool.map(lambda node: _format_once(*node, _write_config(*node)), zip(procs, specs)))
    # Started from this thread, not the pool's: die_with_parent (PR_SET_PDEATHSIG) fires when the
    # *thread* that forked the child exits.
    for proc, spec in zip(procs, specs):
        launch(proc, spec, die_with_parent, wait=False)
    _await_answers(list(zip(procs, specs)), timeout=120)
    return ApacheCluster(procs, die_with_parent)


if __name__ == "__main__":  # tools/bootstrap.sh: fetch every version now, so the first test does not
    for fetched in map(fetch, VERSIONS.values()):
        print(f"onceflow setup: Apache Kafka jars in {fetched}")
