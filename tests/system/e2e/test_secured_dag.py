"""The clickstream pipeline in a running Airflow (scheduler, triggerer, api-server) on a secured Apache
Kafka, one node or the 3-node cluster: SASL_SSL, SCRAM-SHA-512, the ACL authorizer, and exactly the ACLs
``onceflow acls`` prints (the required rows, nothing more). The Airflow side connects as
``onceflow-airflow`` (``onceflow_kafka``), the spark task's spark-submit driver and executors as
``onceflow-spark`` (``onceflow_spark_kafka``). Nobody triggers the run: the triggerer watches the input as
the Airflow side and starts it. Afterwards a signed-in viewer asks the api-server's onceflow page for the
pipeline: the batch committed, and the input's lag, which the api-server asks of the secured broker.

Neither principal's password may show anywhere but in a connection and a process's environment: not on
a command line (spark-submit and its JVM included), in a task's log, rendered fields or XComs, in any
Airflow component's log, on the page, or in the warehouse (the ledger, the votes, the staged copies, the
outputs).
"""

from __future__ import annotations

import json
import time
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from onceflow.core.states import BatchState
from onceflow.kafka.acls import AIRFLOW, SPARK, grants
from onceflow.kafka.admin import ensure_topics
from onceflow_devkit.airflow_env import onceflow_airflow
from onceflow_devkit.local_airflow.auth import auth_env
from onceflow_devkit.local_airflow.rest import AirflowApi
from onceflow_devkit.services.apache_kafka import start_apache_cluster
from onceflow_devkit.services.kafka_broker import CLUSTER, KafkaBroker
from onceflow_devkit.services.kafka_security import SecuredKafka, Security, apply_grants
from onceflow_examples.clickstream import CLICKSTREAM
from tests.conftest import TEST_HOME
from tests.support import SecretWatch
from tests.system.e2e.conftest import ClickstreamWorld, broker_with_topics, emptied

DAG_ID = "clickstream_on_secured_kafka"
SCHEDULE = "input: records=500, max_age_s=8, poll_s=1"
DAG_FILE = f'''# An Airflow DAG: the example pipeline, run when its input has waited long enough (ONCEFLOW_SCHEDULE)
from onceflow.airflow.dag_factory import pipeline_dag
from onceflow_examples.clickstream import CLICKSTREAM

dag = pipeline_dag(CLICKSTREAM, dag_id="{DAG_ID}")
'''
# Airflow's users: one who runs the DAG, one who may only read it (the page's reader).
USERS = {"operator": ("user", "operator-secret"), "viewer": ("viewer", "viewer-secret")}


@contextmanager
def secured_kafka_of(kind: str):
    """A fresh secured Apache Kafka with the pipeline's topics, no ACL yet, stopped on exit: ``node``, one
    node; ``cluster``, three nodes (replication factor 3, min.insync.replicas 2)."""
    if kind == "node":
        with broker_with_topics(secure=True) as secured:
            yield secured
        return
    home = TEST_HOME / f"e2e-secured-cluster-{uuid.uuid4().hex[:6]}"
    cluster = start_apache_cluster(home, secure=True, die_with_parent=True)
    try:
        secured = SecuredKafka(KafkaBroker(cluster.bootstrap, cluster.client_config(), name=CLUSTER),
                               Security(str(home / "security")))
        topics = [*CLICKSTREAM.topics, *(s.target for s in CLICKSTREAM.sinks if s.kind == "kafka")]
        ensure_topics(secured.broker.config(), topics, replication_factor=3)
        yield secured
    finally:
        cluster.stop(kill=True)


def files_holding(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` whose bytes hold ``secret``."""
    needle = secret.encode()
    return [str(path) for path in sorted(root.rglob("*")) if path.is_file() and needle in path.read_bytes()]


def signed_in(airflow, user: str) -> AirflowApi:
    """A REST client of ``airflow``'s api-server, signed in as ``user`` (close it)."""
    return AirflowApi(airflow.api_url, user, USERS[user][1], timeout=60)


def page_of(airflow, user: str, tries: int = 3) -> str:
    """The JSON the onceflow page shows for the DAG, as ``user`` reads it (the text, to look for secrets too).
    The page gives Kafka 3 s to answer and asks again on the next load: a loaded machine gets ``tries``."""
    with httpx.Client(base_url=airflow.api_url, timeout=60, trust_env=False) as client:
        token = client.post("/auth/token", json={"username": user, "password": USERS[user][1]})
        assert token.status_code == 201, token.text
        for _ in range(tries):
            answer = client.get(f"/onceflow/api/pipelines/{DAG_ID}",
                                headers={"Authorization": f"Bearer {token.json()['access_token']}"})
            assert answer.status_code == 200, answer.text
            if answer.json()["lag_error"] is None:
                break
            time.sleep(2)
        return answer.text


def first_run(api, timeout: float) -> dict:
    """The DAG's first run, once finished (a loaded machine's api-server may not answer at once)."""
    deadline = time.monotonic() + timeout
    runs = []
    while not runs:
        assert time.monotonic() < deadline, f"no run of {DAG_ID} within {timeout:.0f} s"
        time.sleep(1)
        try:
            runs = api.runs(DAG_ID)
        except httpx.TransportError:
            continue
    run_id = runs[0]["dag_run_id"]
    api.wait_for_run(DAG_ID, run_id, timeout=max(deadline - time.monotonic(), 60))
    return api.run(DAG_ID, run_id)


@pytest.mark.slow  # Airflow's start, then a spark-submit: minutes
@pytest.mark.timeout(2400)  # at a load average of 25 its one run took 12 min (its spark-submit timed out once)
@pytest.mark.parametrize("kafka", ["node", "cluster"])
def test_a_run_the_input_starts_commits_on_the_secured_broker_with_the_printed_acls_and_no_password_shows(
        kafka, tmp_path, postgres_server, e2e_rest_catalog):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "secured.py").write_text(DAG_FILE)
    with secured_kafka_of(kafka) as secured:
        apply_grants(secured.broker.config(), grants(CLICKSTREAM.kafka_resources(), required_only=True))
        airflow_side, spark_side = secured.as_user(AIRFLOW.default_user), secured.as_user(SPARK.default_user)
        passwords = {user.client_config["sasl.username"]: user.client_config["sasl.password"]
                     for user in (airflow_side, spark_side)}
        warehouse = f"file://{tmp_path}/warehouse"
        airflow = onceflow_airflow(tmp_path / "airflow", airflow_side, warehouse, spark_kafka=spark_side,
                                   dags_folder=dags, plugins_folder=None, triggerer=True, postgres=postgres_server,
                                   extra_env={"ONCEFLOW_SCHEDULE": SCHEDULE, **auth_env(tmp_path / "auth", USERS)},
                                   iceberg_rest=emptied(e2e_rest_catalog))
        world = ClickstreamWorld(secured.broker, warehouse, airflow, catalog=e2e_rest_catalog)  # the harness reads and audits as the admin
        watches = {user: SecretWatch(password) for user, password in passwords.items()}
        with airflow, signed_in(airflow, "operator") as api:
            api.wait_for_dag(DAG_ID, timeout=180)
            api.unpause(DAG_ID)
            with ExitStack() as watching:
                for watch in watches.values():
                    watching.enter_context(watch)
                world.produce(600, seed=56)
                run = first_run(api, timeout=1800)
            run_id = run["dag_run_id"]
            assert run["state"] == "success", api.explain(DAG_ID, run_id)
            assert run["run_type"] == "asset_triggered"
            assert api.task_states(DAG_ID, run_id) == {
                "plan": "success", "spark": "success", "commit": "success", "rollback": "skipped"}
            exposed = [f"{user}'s password: {where}" for user, watch in watches.items()
                       for where in watch.exposures(api, DAG_ID, run_id)]
            page = page_of(airflow, "viewer")
        exposed += [f"{user}'s password: on the onceflow page" for user, password in passwords.items() if password in page]
        # On disk: the warehouse (ledger, votes, staged copies, outputs) and the Airflow home (every log).
        exposed += [f"{user}'s password: in {path}" for user, password in passwords.items()
                    for root in (tmp_path / "warehouse", tmp_path / "airflow") for path in files_holding(root, password)]
        assert not exposed, "\n".join(exposed)

        batch = world.runtime.batch_of_run(run_id)
        assert batch is not None and batch.state is BatchState.COMMITTED, batch
        # The page: the run's batch committed, and the input's lag as the api-server read it from the broker
        # with the Airflow side's connection: every record produced is committed.
        view = json.loads(page)
        assert [(row["run_id"], row["state"]) for row in view["batches"]] == [(run_id, "committed")], view["batches"]
        assert view["lag_error"] is None and {row["topic"] for row in view["lag"]} == set(CLICKSTREAM.topics), view
        assert sum(row["lag"] for row in view["lag"]) == 0 < sum(row["last_stable"] for row in view["lag"]), view["lag"]
        report = world.audit()
        assert report.ok and report.input_records == 600 and report.committed_batches == 1, report.summary()
