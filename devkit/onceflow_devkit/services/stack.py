"""The embedded stack: one S3 endpoint, one Kafka broker (or a 3-node Apache Kafka cluster) and
one PostgreSQL server (Airflow's metadata databases), on 127.0.0.1.

Runs on the developer's or CI's machine. State lives under ``<home>/``
(``.onceflow/`` by default): a directory per service, ``stack.json`` (read by
the dev kit's own commands) and ``stack.env``, the variables that point the
library's commands and jobs at the stack (the library reads only its
environment: ``onceflow.config.settings``).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

from onceflow_devkit.services.apache_kafka import ApacheCluster
from onceflow.kafka.acls import AIRFLOW, SPARK
from onceflow_devkit.services.kafka_broker import CLUSTER, DEFAULT_BROKER, STACK_BROKERS, KafkaBroker, start_broker
from onceflow_devkit.services.kafka_security import SecuredKafka, Security
from onceflow_devkit.services.postgres import PostgresServer, postgres_bin, start_postgres
from onceflow_devkit.services.process import ManagedProcess, ServiceError, pick_port, write_private
from onceflow_devkit.services.s3 import S3Endpoint, start_moto


def onceflow_home() -> Path:
    """Where the dev kit keeps its services' state: ``$ONCEFLOW_HOME`` or ``./.onceflow``."""
    return Path(os.environ.get("ONCEFLOW_HOME", ".onceflow")).resolve()


@dataclass(frozen=True)
class StackInfo:
    kafka: KafkaBroker  # a secured broker's: the dev kit admin's settings (its own commands create topics)
    s3: S3Endpoint
    postgres: PostgresServer | None = None  # None: PostgreSQL is not installed (Airflow falls back to SQLite)
    security: str | None = None  # a secured broker's credentials (``kafka_security``)

    def kafka_as(self, user: str) -> KafkaBroker:
        """The broker as ``user`` sees it (a secured broker's other users; the one broker otherwise)."""
        return SecuredKafka(self.kafka, Security(self.security)).as_user(user) if self.security else self.kafka

    @property
    def airflow_kafka(self) -> KafkaBroker:
        """The broker as the Airflow side's principal sees it (``onceflow.kafka.acls``; the one broker unsecured)."""
        return self.kafka_as(AIRFLOW.default_user)

    @property
    def spark_kafka(self) -> KafkaBroker | None:
        """The broker as the Spark side's principal sees it, where that is a principal of its own (secured)."""
        return self.kafka_as(SPARK.default_user) if self.security else None

    def env(self) -> dict[str, str]:
        """The variables that point onceflow's CLI and Spark jobs at this stack: on a secured broker, as
        the Airflow side's user (``onceflow.kafka.acls``), whose ACLs ``onceflow acls`` prints."""
        return {**self.airflow_kafka.environment(), "ONCEFLOW_S3_ENDPOINT": self.s3.endpoint_url,
                **self.s3.credentials_env()}

    def to_json(self) -> str:
        return json.dumps({"kafka": asdict(self.kafka), "s3": asdict(self.s3),
                           "postgres": asdict(self.postgres) if self.postgres else None, "security": self.security},
                          indent=2)

    @classmethod
    def from_json(cls, text: str) -> "StackInfo":
        raw = json.loads(text)
        postgres = raw.get("postgres")
        return cls(KafkaBroker(**raw["kafka"]), S3Endpoint(**raw["s3"]), PostgresServer(**postgres) if postgres else None,
                   raw.get("security"))


class EmbeddedStack:
    def __init__(self, home: Path, die_with_parent: bool = False, usual_ports: bool = True):
        """``usual_ports``: take 9000 and 9092 when free. A stack that runs beside others restarting
        their brokers (chaos runs) takes any free port instead: a restarted broker binds its old
        port again, and another stack starting meanwhile must not find it free and take it."""
        self.home = Path(home).resolve()
        self.die_with_parent = die_with_parent
        self.usual_ports = usual_ports
        self.s3_proc = ManagedProcess("s3", self.home / "s3")
        self.kafka_proc = ManagedProcess("kafka", self.home / "kafka")
        self.postgres_proc = ManagedProcess("postgres", self.home / "postgres")

    @property
    def info_file(self) -> Path:
        return self.home / "stack.json"

    @property
    def env_file(self) -> Path:
        """``info().env()`` as shell assignments, readable only by its owner."""
        return self.home / "stack.env"

    def info(self) -> StackInfo | None:
        """What is running now, or None when the stack is (partly) down."""
        if not self.info_file.exists():
            return None
        info = StackInfo.from_json(self.info_file.read_text())
        if self.s3_proc.running_pid() is None or self.dead_kafka_nodes(info) or (
                info.postgres is not None and self.postgres_proc.running_pid() is None):
            return None
        return info

    def cluster(self, info: StackInfo | None = None) -> ApacheCluster | None:
        """The Kafka cluster's nodes when the stack runs one (``--broker apache-cluster``)."""
        info = info or (StackInfo.from_json(self.info_file.read_text()) if self.info_file.exists() else None)
        if info is None or info.kafka.name != CLUSTER:
            return None
        return ApacheCluster.at(self.kafka_proc.directory, self.die_with_parent)

    def kafka_pids(self) -> list[int]:
        """The broker's process, or every live node's."""
        cluster = self.cluster()
        if cluster is not None:
            return cluster.pids()
        pid = self.kafka_proc.running_pid()
        return [] if pid is None else [pid]

    def dead_kafka_nodes(self, info: StackInfo | None = None) -> list[int]:
        """Indexes of the Kafka nodes that are down ([0] for a single broker that is)."""
        cluster = self.cluster(info)
        if cluster is not None:
            return [i for i in range(len(cluster.procs)) if i not in cluster.running()]
        return [0] if self.kafka_proc.running_pid() is None else []

    def revive_kafka(self) -> None:
        """Start whatever Kafka node is down (a fault's restart that failed, or never came)."""
        cluster = self.cluster()
        if cluster is None:
            self.restart_broker()
            return
        for i in self.dead_kafka_nodes():
            cluster.start(i)

    def up(self, broker: str = DEFAULT_BROKER, secure: bool = False) -> StackInfo:
        """Start whatever is not running. Idempotent; stale PID files from a
        killed run are detected and replaced. ``secure``: Apache Kafka on SASL_SSL
        with the ACL authorizer (``kafka_security``)."""
        if broker not in STACK_BROKERS:
            raise ServiceError(f"unknown broker {broker!r}: choose one of {', '.join(STACK_BROKERS)}")
        running = self.info()
        if running is not None:
            if running.kafka.name == broker and bool(running.security) == secure:
                return running
            raise ServiceError(
                f"the stack in {self.home} runs {running.kafka.name}{' secured' if running.security else ''}, not "
                f"{broker}{' secured' if secure else ''}: run `onceflow services down` first"
            )
        self.down()  # a half-up stack (one service died) is restarted whole
        s3 = start_moto(self.s3_proc, die_with_parent=self.die_with_parent, port=self._port())
        kafka = start_broker(broker, self.kafka_proc, s3=s3, die_with_parent=self.die_with_parent, port=self._port(),
                             secure=secure)
        security = str(self.kafka_proc.directory / "security") if secure else None
        if security:
            Security(security).write_admin_properties()
        info = StackInfo(kafka, s3, self._start_postgres(), security)
        # Both hold the embedded services' keys: readable by their owner only.
        write_private(self.info_file, info.to_json())
        write_private(self.env_file, "".join(f"{k}={shlex.quote(v)}\n" for k, v in info.env().items()))
        return info

    def _start_postgres(self) -> PostgresServer | None:
        try:
            postgres_bin()
        except ServiceError:  # said where Airflow starts: its metadata is SQLite then (airflow_env)
            return None
        return start_postgres(self.postgres_proc, die_with_parent=self.die_with_parent, port=self._port())

    def _port(self) -> int | None:
        """A service's port: None lets it take its usual port when free (see ``usual_ports``)."""
        return None if self.usual_ports else pick_port(None)

    def restart_broker(self, kill: bool = False) -> KafkaBroker:
        """Stop the broker (SIGKILL when ``kill``) and start it on the same port; a cluster's every
        node at once.

        noida-db keeps its data but loses open transactions; Tansu on its
        S3 engine keeps both.
        """
        # The broker may already be down (that is when a restart is needed most).
        if not self.info_file.exists() or self.s3_proc.running_pid() is None:
            raise ServiceError(f"the stack in {self.home} is not running: `onceflow services up` starts it")
        info = StackInfo.from_json(self.info_file.read_text())
        cluster = self.cluster(info)
        if cluster is not None:
            cluster.restart_all(kill=kill)
            return info.kafka
        port = self.kafka_proc.port()
        self.kafka_proc.end(kill)  # kill() waits until nobody listens on the port: a killed JVM's threads hold it a while
        return start_broker(info.kafka.name, self.kafka_proc, s3=info.s3, port=port, die_with_parent=self.die_with_parent,
                            secure=bool(info.security))

    def down(self) -> list[str]:
        """Stop every service by PID; returns the names that were running."""
        cluster = self.cluster() if self.info_file.exists() else None
        stopped = [p.name for p in (*(cluster.procs if cluster else ()), self.kafka_proc, self.s3_proc, self.postgres_proc)
                   if p.stop(grace=2 if cluster else 10)]
        self.info_file.unlink(missing_ok=True)
        self.env_file.unlink(missing_ok=True)
        return stopped

    def status(self) -> list[dict]:
        cluster = self.cluster()
        return [
            {"service": p.name, "pid": p.running_pid(), "port": p.port(), "log": str(p.log_file)}
            for p in (self.s3_proc, *(cluster.procs if cluster else (self.kafka_proc,)), self.postgres_proc)
        ]


def environment_broker() -> KafkaBroker:
    """The cluster ``ONCEFLOW_KAFKA_BOOTSTRAP`` names, known by name (and so by its
    capabilities) when it is the embedded stack's (benchmarks, ``onceflow audit``)."""
    from onceflow.config.kafka_cluster import KafkaCluster

    from onceflow_devkit.services.kafka_broker import broker_at

    cluster = KafkaCluster.from_environment()
    broker = broker_at(cluster.bootstrap, EmbeddedStack(onceflow_home()).info())
    return KafkaBroker(cluster.bootstrap, cluster.client_config, name=broker.name)
