"""Session fixtures: real services on 127.0.0.1, started by the project's own code.

- ``s3_endpoint``: moto_server (or ``ONCEFLOW_S3_ENDPOINT``); ``s3_bucket``
  gives each test a fresh bucket.
- ``kafka_broker``: parametrized over Apache Kafka 4.x (started from its jars),
  the compatible brokers noida and tansu (slow) and, when
  ``ONCEFLOW_KAFKA_BOOTSTRAP`` is set, the external one. Choose with
  ``ONCEFLOW_TEST_BROKERS=apache,apache-3.9,noida,tansu,external``.
- ``restart_broker``: restart the embedded broker a test runs on.
- ``secured_kafka``: Apache Kafka 4.x on SASL_SSL (SCRAM-SHA-512) with the ACL authorizer, started on
  first use; its ``broker`` is the dev kit admin's, ``as_user(name)`` any other user's.
- ``spark``: a local[2] SparkSession whose Python workers use this venv.
- ``spark_standalone``: a Spark standalone master and worker (cluster mode).
- ``spark_connect_server``: a Spark Connect server (local[2]) whose Python
  workers have the S3 keys, as ``spark``'s executors do, and the PostgreSQL connection.
- ``hdfs_cluster``: HDFS (Apache Hadoop's NameNode and DataNode, from their jars);
  ``hdfs_storage`` is HadoopStorage on ``spark``'s JVM configured as its client.
- ``postgres_server``: a PostgreSQL cluster of Debian's package, two-phase commit enabled; it also
  holds the metadata database of every Airflow the system tests start.
- ``redis_server``: Debian's Redis, the broker of the Celery executor's test.
- ``rest_catalog``: Iceberg's REST catalog server (from its jars), its SQLite file and its
  warehouse in the session's directories; each test names tables in a namespace of its own.
- ``airflow_home``: a migrated SQLite Airflow home pointing at dags/ and plugins/.

Service state lives in ``.onceflow/test/``. Processes are started so they die
with the test process, and the next session removes whatever a killed run
left behind (PID files are checked against the process they name).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from onceflow_devkit.services.hdfs import HdfsCluster, start_hdfs
from onceflow_devkit.services.kafka_broker import COMPATIBLE, DEFAULT_BROKER, KafkaBroker, start_broker
from onceflow_devkit.services.kafka_security import SecuredKafka, Security
from onceflow_devkit.services.postgres import CONN_ID as POSTGRES_CONN_ID, PostgresServer, start_postgres
from onceflow_devkit.services.process import ANY_PORT_VAR, PORT_SHARE_VAR, ManagedProcess, port_share
from onceflow_devkit.services.rest_catalog import RestCatalog, start_rest_catalog
from onceflow_devkit.services.s3 import ACCESS_KEY as S3_ACCESS_KEY, SECRET_KEY as S3_SECRET_KEY, S3Endpoint, start_moto
from onceflow_devkit.services.spark_connect import SparkConnectServer, start_connect_server
from onceflow_devkit.services.spark_standalone import SparkStandalone, start_standalone
from tests import shared_services
from tests.shared_services import SharedService
from tests.support import hdfs_client_storage

ROOT = Path(__file__).resolve().parent.parent
# boto3's credential chain (a test without keys) must never ask a cloud metadata
# address: tests talk to 127.0.0.1 only. Subprocesses inherit this.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
# make test's workers start their services side by side: none may race another for a usual port, and
# each takes its ports from a share of its own (PYTEST_XDIST_WORKER is gw0, gw1, ...; unset without workers).
os.environ[ANY_PORT_VAR] = "1"
os.environ[PORT_SHARE_VAR] = port_share(int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]),
                                        int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
TESTS_ROOT = ROOT / ".onceflow" / "test"
# One directory per pytest process, so concurrent sessions never share a broker.
TEST_HOME = TESTS_ROOT / f"session-{os.getpid()}"


def _remove_dead_sessions() -> None:
    """Whatever a killed run left (PID files, data, stray processes) goes."""
    for leftover in TESTS_ROOT.glob("session-*"):
        pid = int(leftover.name.split("-", 1)[1])
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            for service_dir in leftover.iterdir():
                if service_dir.is_dir():
                    ManagedProcess(service_dir.name, service_dir).reset()
            shutil.rmtree(leftover, ignore_errors=True)


def _fresh_process(name: str) -> ManagedProcess:
    return ManagedProcess(name, TEST_HOME / name).reset()


def pytest_sessionstart(session):
    _remove_dead_sessions()


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(TEST_HOME, ignore_errors=True)


# Tests that mostly wait on servers (whole pipelines in Airflow) first, pure logic last: `make test`
# hands test files to its workers in this order, so no long file starts when the others are done.
# A stable sort: each file's tests keep their order, and so share their module's fixtures.
_TIERS = ("tests/system/", "tests/integration/", "tests/unit/")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: next((i for i, tier in enumerate(_TIERS) if item.nodeid.startswith(tier)), len(_TIERS)))


@pytest.fixture(autouse=True)
def _shared_services_stay_up():
    """A test that leaves a shared service down or frozen fails itself, not the test after it."""
    yield
    broken = shared_services.unhealthy()
    if broken:
        pytest.fail("this test left shared services unhealthy: " + "; ".join(broken), pytrace=False)


def _broker_names() -> list[str]:
    """The brokers of the matrix: Apache Kafka, then the compatible brokers (and the external one)."""
    wanted = os.environ.get("ONCEFLOW_TEST_BROKERS")
    if wanted:
        return [n for n in wanted.split(",") if n]
    return [DEFAULT_BROKER, *COMPATIBLE] + (["external"] if os.environ.get("ONCEFLOW_KAFKA_BOOTSTRAP") else [])


def _broker_params() -> list:
    """The ``kafka_broker`` matrix: by default the compatible brokers are in the slow set (``make test``
    runs Apache Kafka); named in ``ONCEFLOW_TEST_BROKERS``, each runs as asked."""
    chosen = bool(os.environ.get("ONCEFLOW_TEST_BROKERS"))
    return [name if chosen or name not in COMPATIBLE else pytest.param(name, marks=pytest.mark.slow)
            for name in _broker_names()]


@pytest.fixture(scope="session")
def s3_endpoint():
    if os.environ.get("ONCEFLOW_S3_ENDPOINT"):
        # An external endpoint for the whole suite: its keys are what tests hand to Airflow connections.
        yield S3Endpoint(os.environ["ONCEFLOW_S3_ENDPOINT"], os.environ["AWS_ACCESS_KEY_ID"],
                         os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_DEFAULT_REGION"])
        return
    proc = _fresh_process("s3")
    endpoint = start_moto(proc, die_with_parent=True)
    shared_services.register(SharedService("s3", (proc,), (proc.port(),)))
    yield endpoint
    shared_services.unregister("s3")
    proc.stop(grace=2)


def pytest_report_header(config) -> str:
    from onceflow_devkit.services.postgres import postgres_bin
    from onceflow_devkit.services.process import ServiceError

    try:
        return f"Airflow's metadata database: a database per Airflow home on the dev kit's PostgreSQL ({postgres_bin()})"
    except ServiceError as exc:
        return f"Airflow's metadata database: none, the tests that run Airflow fail: {exc}"


@pytest.fixture(scope="session")
def redis_server():
    from onceflow_devkit.services.redis import start_redis

    proc = _fresh_process("redis")
    server = start_redis(proc, die_with_parent=True)
    shared_services.register(SharedService("redis", (proc,), (server.port,)))
    yield server
    shared_services.unregister("redis")
    proc.stop(grace=5)


@pytest.fixture(scope="session")
def postgres_server() -> PostgresServer:
    proc = _fresh_process("postgres")
    server = start_postgres(proc, die_with_parent=True)
    shared_services.register(SharedService("postgres", (proc,), (server.port,)))
    yield server
    shared_services.unregister("postgres")
    proc.stop(grace=5)


@pytest.fixture(scope="session")
def rest_catalog(tmp_path_factory) -> RestCatalog:
    proc = _fresh_process("iceberg-rest")
    catalog = start_rest_catalog(proc, f"file://{tmp_path_factory.mktemp('rest-lake')}", die_with_parent=True)
    shared_services.register(SharedService("iceberg-rest", (proc,), (catalog.port,),
                                           restore=lambda: catalog.restart(kill=True, die_with_parent=True)))
    yield catalog
    shared_services.unregister("iceberg-rest")
    proc.stop(grace=5)


@pytest.fixture
def s3_bucket(s3_endpoint: S3Endpoint) -> str:
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    s3_endpoint.client().create_bucket(Bucket=bucket)
    return bucket


class _Brokers:
    """Embedded brokers started on first use and kept for the session."""

    def __init__(self, request: pytest.FixtureRequest):
        self.request = request
        self.running: dict[str, tuple[KafkaBroker, ManagedProcess | None]] = {}

    def get(self, name: str) -> KafkaBroker:
        if name not in self.running:
            if name == "external":
                from onceflow.config.kafka_cluster import KafkaCluster

                cluster = KafkaCluster.from_environment()
                self.running[name] = (KafkaBroker(cluster.bootstrap, cluster.client_config, name="external"), None)
            else:
                s3 = self.request.getfixturevalue("s3_endpoint") if name == "tansu" else None
                proc = _fresh_process(f"kafka-{name}")
                kind, secure = name.removesuffix(SECURED), name.endswith(SECURED)
                self.running[name] = (start_broker(kind, proc, s3=s3, die_with_parent=True, secure=secure), proc)
                shared_services.register(SharedService(f"kafka-{name}", (proc,), (proc.port(),),
                                                       restore=lambda: self.restart(name, kill=True)))
        return self.running[name][0]

    def restart(self, name: str, kill: bool = False) -> KafkaBroker:
        broker, proc = self.running[name]
        if proc is None:
            pytest.skip(reason="cannot restart an external broker")
        port = proc.port()
        proc.end(kill)  # kill() waits until nobody listens on the port: a killed JVM's threads hold it a while
        s3 = self.request.getfixturevalue("s3_endpoint") if name == "tansu" else None
        kind, secure = name.removesuffix(SECURED), name.endswith(SECURED)
        self.running[name] = (start_broker(kind, proc, s3=s3, port=port, die_with_parent=True, secure=secure), proc)
        return self.running[name][0]

    def stop_all(self) -> None:
        for name, (_, proc) in self.running.items():
            shared_services.unregister(f"kafka-{name}")
            if proc is not None:
                proc.stop(grace=2)


@pytest.fixture(scope="session")
def _brokers(request):
    brokers = _Brokers(request)
    yield brokers
    brokers.stop_all()


SECURED = "-secured"


@pytest.fixture(scope="session")
def secured_kafka(_brokers) -> SecuredKafka:
    broker = _brokers.get(DEFAULT_BROKER + SECURED)
    return SecuredKafka(broker, Security(str(_brokers.running[DEFAULT_BROKER + SECURED][1].directory / "security")))


@pytest.fixture(params=_broker_params())
def kafka_broker(request, _brokers) -> KafkaBroker:
    return _brokers.get(request.param)


@pytest.fixture
def one_kafka_broker(_brokers) -> KafkaBroker:
    """The first broker of the matrix (Apache Kafka by default): for tests whose subject is not the broker."""
    return _brokers.get(_broker_names()[0])


@pytest.fixture
def pause_one_broker(one_kafka_broker, _brokers):
    """A context manager: inside it ``one_kafka_broker`` stops answering (SIGSTOP), as a hung broker
    does; it answers again on leaving, whatever happened inside."""
    import signal
    from contextlib import contextmanager

    _, proc = _brokers.running[one_kafka_broker.name]
    if proc is None:
        pytest.skip(reason="cannot pause an external broker")

    @contextmanager
    def paused():
        pid = proc.running_pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    return paused


@pytest.fixture
def restart_broker(kafka_broker, _brokers):
    """Call as ``restart_broker(kill=True)``; returns the broker (same address)."""
    return lambda kill=False: _brokers.restart(kafka_broker.name, kill=kill)


def _s3_keys() -> dict[str, str]:
    """The S3 keys Spark's workers get (options carry no secret): the embedded endpoint's, or the external one's."""
    external = bool(os.environ.get("ONCEFLOW_S3_ENDPOINT"))
    return {
        "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"] if external else S3_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"] if external else S3_SECRET_KEY,
    }


@pytest.fixture(scope="session")
def spark():
    from onceflow.spark.local_session import local_spark

    # Executors get the S3 keys the way users are told to give them: spark.executorEnv.
    session = local_spark("onceflow-tests", **{f"spark.executorEnv.{k}": v for k, v in _s3_keys().items()})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_standalone() -> SparkStandalone:
    master, worker = _fresh_process("spark-master"), _fresh_process("spark-worker")
    cluster = start_standalone(master, worker, die_with_parent=True)
    shared_services.register(SharedService("spark-standalone", (master, worker), ()))
    yield cluster
    shared_services.unregister("spark-standalone")
    worker.stop(grace=5)
    master.stop(grace=5)


@pytest.fixture(scope="session")
def hdfs_cluster() -> HdfsCluster:
    namenode, datanode = _fresh_process("hdfs-namenode"), _fresh_process("hdfs-datanode")
    cluster = start_hdfs(namenode, datanode, die_with_parent=True)
    shared_services.register(SharedService("hdfs", (namenode, datanode), (cluster.rpc_port,)))
    yield cluster
    shared_services.unregister("hdfs")
    cluster.stop()


@pytest.fixture(scope="session")
def hdfs_storage(hdfs_cluster, spark, tmp_path_factory):
    return hdfs_client_storage(spark, hdfs_cluster, tmp_path_factory.mktemp("hdfs-client"))


@pytest.fixture(scope="session")
def spark_connect_server(postgres_server) -> SparkConnectServer:
    proc = _fresh_process("spark-connect")
    # The server's Python workers hold the secrets the data sources need, as a deployment's would.
    secrets = {**_s3_keys(), f"AIRFLOW_CONN_{POSTGRES_CONN_ID.upper()}": postgres_server.uri()}
    server = start_connect_server(proc, env=secrets, die_with_parent=True)
    shared_services.register(SharedService("spark-connect", (proc,), (server.port,)))
    yield server
    shared_services.unregister("spark-connect")
    proc.stop(grace=5)


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory) -> dict[str, str]:
    """Environment for Airflow subprocesses: a migrated SQLite home using dags/ and plugins/."""
    home = tmp_path_factory.mktemp("airflow-home")
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        }
    )
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    return env
