"""The onceflow pipeline list at fifty pipelines, in a real browser (Debian's chromium driven by
Playwright) against a real api-server, with Airflow's own auth.

Fifty DAGs of ``pipeline_dag`` (one DAG file, paused: no run starts), each its own input topic
on a real broker and its own ledger in the warehouse, written here as the protocol writes it,
in states that cover the health table's rows (``onceflow.airflow.ui.health.RULES``); one
pipeline's Kafka connection points at a port nothing listens on. Asserted: the columns of a
sample of rows, and that "Needs a person" shows exactly the pipelines the table flags. The
list's server time (its Server-Timing header, and the browser's own measure) is printed, not
asserted. Slow.
"""

from __future__ import annotations

import json
import re
import time
from contextlib import closing

import httpx
import pytest
from confluent_kafka import Producer

from onceflow.core.ledger.ledger import BATCH_EFFECT
from onceflow.core.ledger.records import Decision, DecisionOutcome, DoneMarker, FailedEffect
from onceflow.core.participant import Vote
from onceflow.core.plan import OffsetRange, Plan, SinkPlan
from onceflow.core.planning.interventions import Action, Intervention
from onceflow.kafka.admin import ensure_topics
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow.pipeline.spec import PipelineSpec, SinkSpec
from onceflow.sinks.kafka.handle import TxnHandle
from onceflow_devkit.airflow_env import onceflow_airflow
from onceflow_devkit.local_airflow.auth import auth_env
from onceflow_devkit.services.process import pick_port
from tests.system.e2e.conftest import broker_with_topics
from tests.system.e2e.browser import SCREENSHOTS, browser_page, chromium
from tests.system.e2e.test_onceflow_page import USERS, _sign_in

N = 50
MIN = 60_000
TIMEOUT_MS = 900_000  # the Kafka output's transaction timeout (the sink's default)
# Each pipeline's scenario, by index (what its ledger and input hold); the rest are healthy.
SCENARIOS = {
    0: "stuck", 1: "failed", 2: "near_timeout", 3: "replay_aborted", 4: "aborted_once", 5: "aborted_split",
    6: "overdue", 7: "kafka_silent", 8: "no_batch", 9: "manual_old_records", 10: "hourly_old_records",
}
NEEDS_PERSON = {"fleet00", "fleet01", "fleet02", "fleet03", "fleet06", "fleet07"}
SCHEDULES = {9: None, 10: "@hourly"}
MINUTES, HOUR_OLD = re.compile(r"^\d+ min ago$"), re.compile(r"^6\d min$")
# What a sample of rows shows, by column (the cells' classes).
SHOWN = {
    "fleet20": {"health": "ok", "batch": "0000000003", "latest-state": "committed", "behind": "0", "oldest": "-",
                "last-commit": MINUTES, "transactions": "none"},
    "fleet21": {"health": "ok", "behind": "2"},  # fresh records: behind, not overdue
    "fleet00": {"health": "stuck", "latest-state": "prepared", "last-commit": "3.0 h ago", "behind": "4"},
    "fleet01": {"health": "failed", "latest-state": "committing"},
    "fleet02": {"health": "transactions near timeout", "transactions": re.compile(r"^2 open, [6-9]\d% used$")},
    "fleet03": {"health": "replay aborted", "batch": "0000000003"},
    "fleet04": {"health": "aborted"},
    "fleet05": {"health": "aborted"},
    "fleet06": {"health": "commits overdue", "behind": "3", "oldest": HOUR_OLD},
    # the ledger's part, still shown
    "fleet07": {"health": "Kafka silent", "behind": "Kafka silent", "latest-state": "committed", "batch": "0000000003"},
    "fleet08": {"health": "ok", "batch": "no batch yet", "last-commit": "never", "behind": "6"},
    # records an hour old: overdue on a 5-minute schedule (fleet06), not on a manual one nor an hourly one
    "fleet09": {"health": "ok", "oldest": HOUR_OLD},
    "fleet10": {"health": "ok", "oldest": HOUR_OLD},
}
DAG_FILE = '''"""Fifty onceflow pipelines from one file (the pipeline list's browser test)."""
import json, os
from datetime import timedelta

from airflow.sdk import DAG  # noqa: F401  (the DAG processor parses files that name it)

from onceflow.airflow.dag_factory import pipeline_dag
from onceflow.pipeline.spec import PipelineSpec

for p in json.loads(open(os.environ["FLEET_PIPELINES"]).read()):
    globals()[p["dag_id"]] = pipeline_dag(PipelineSpec.from_json(p["spec"]), dag_id=p["dag_id"], schedule=p["schedule"],
                                          kafka_conn_id=p["kafka_conn_id"], spark_timeout=timedelta(hours=2))
'''


def spec_of(i: int) -> PipelineSpec:
    name = f"fleet{i:02d}"
    return PipelineSpec(name, (f"{name}_in",), "onceflow_examples.clickstream:transform",
                        (SinkSpec("out", "kafka", f"{name}_out", splits=2, transaction_timeout_ms=TIMEOUT_MS),
                         SinkSpec("files", "files", f"fleet/{name}")))


class LedgerWriter:
    """Writes one pipeline's batches as the coordinator would, at the times given (epoch ms)."""

    def __init__(self, runtime: PipelineRuntime):
        self.ledger = runtime.reader.ledger
        self.name = runtime.spec.name
        self.topic = runtime.spec.topics[0]

    def plan(self, seq: int, start: int, end: int, at: int, replay_of: int | None = None) -> None:
        sinks = (SinkPlan("out", "kafka", 2), SinkPlan("files", "files", 1))
        self.ledger.create_plan(Plan(self.name, seq, (OffsetRange(self.topic, 0, start, end),), sinks, created_at_ms=at,
                                     replay_of=replay_of, run_id=f"manual__{seq}"))

    def voted(self, seq: int, at: int, handles_from: int | None = None) -> dict[str, Vote]:
        self.ledger.claim_attempt(seq, "test", at)
        handles = [] if handles_from is None else [
            TxnHandle(self.name, "out", f"{seq:010d}", split, f"{self.name}_out", f"onceflow.{self.name}.out.b{seq}.{split}",
                      7, 0, handles_from + split * 1000).to_dict() for split in range(2)]
        votes = {"out": Vote("out", seq, 1, {"handles": handles}, 3), "files": Vote("files", seq, 1, {}, 3)}
        for vote in votes.values():
            self.ledger.create_vote(vote, at)
        return votes

    def decided(self, seq: int, outcome: DecisionOutcome, votes: dict[str, Vote], at: int) -> None:
        self.ledger.create_decision(Decision(seq, outcome, 1, votes, "test", at, "all votes valid"))

    def done(self, seq: int, outcome: DecisionOutcome, at: int) -> None:
        for effect in ("out", "files", BATCH_EFFECT):
            self.ledger.create_done(DoneMarker(seq, effect, outcome, "done", "test", at))

    def finished(self, seq: int, start: int, end: int, at: int, outcome=DecisionOutcome.COMMIT, replay_of=None) -> None:
        self.plan(seq, start, end, at - 40_000, replay_of)
        votes = self.voted(seq, at - 20_000)
        self.decided(seq, outcome, votes, at - 10_000)
        self.done(seq, outcome, at)


def produce(config, topic: str, n: int, timestamp_ms: int | None = None) -> None:
    producer = Producer(config)
    for i in range(n):
        producer.produce(topic, value=f"r{i}".encode(), partition=0, **({"timestamp": timestamp_ms} if timestamp_ms else {}))
    assert producer.flush(30) == 0


def build_fleet(broker, warehouse: str, now: int) -> None:
    """Every pipeline's input (6 records, committed by three batches) and ledger, then each scenario's twist."""
    config = broker.config()
    ensure_topics(config, [f"fleet{i:02d}_in" for i in range(N)], partitions=1)
    for i in range(N):
        spec, scenario = spec_of(i), SCENARIOS.get(i, "healthy")
        old = scenario in ("overdue", "manual_old_records", "hourly_old_records")
        produce(config, spec.topics[0], 6, now - 65 * MIN if old else None)
        if scenario == "no_batch":
            continue
        w = LedgerWriter(PipelineRuntime(spec, Deployment(warehouse, broker)))
        later = scenario in ("stuck", "failed", "near_timeout", "replay_aborted", "aborted_once", "aborted_split")
        committed = 1 if later else 3
        ago = 180 * MIN if scenario == "stuck" else 10 * MIN if later else 2 * MIN
        for seq in range(1, committed + 1):
            w.finished(seq, (seq - 1) * 2, seq * 2, now - ago - (committed - seq) * MIN)
        if scenario in ("healthy", "kafka_silent") and i % 2:
            produce(config, spec.topics[0], 2)  # fresh records: a lag, not overdue
        elif scenario == "stuck":
            w.plan(2, 2, 6, now - 179 * MIN)
            w.voted(2, now - 178 * MIN)
        elif scenario == "failed":
            w.plan(2, 2, 6, now - 3 * MIN)
            w.decided(2, DecisionOutcome.COMMIT, w.voted(2, now - 2 * MIN), now - MIN)
            w.ledger.write_failed(FailedEffect(2, "files", DecisionOutcome.COMMIT, "the warehouse refused the rename",
                                               "test", now - MIN))
        elif scenario == "near_timeout":
            w.plan(2, 2, 6, now - 10 * MIN)
            w.decided(2, DecisionOutcome.COMMIT, w.voted(2, now - 9 * MIN, handles_from=now - int(9.5 * MIN)), now - MIN // 2)
        elif scenario in ("replay_aborted", "aborted_split"):
            w.finished(2, 2, 6, now - 5 * MIN, DecisionOutcome.ABORT)
            w.finished(3, 2, 6, now - 3 * MIN, DecisionOutcome.ABORT, replay_of=2)
            if scenario == "aborted_split":
                w.ledger.create_intervention(Intervention(3, Action.SPLIT, "ada", "poison record", now - MIN,
                                                          max_records_per_partition=1))
        elif scenario == "aborted_once":
            w.finished(2, 2, 6, now - 3 * MIN, DecisionOutcome.ABORT)
        elif scenario in ("overdue", "manual_old_records", "hourly_old_records"):
            produce(config, spec.topics[0], 3, now - 61 * MIN)  # after the committed six: waiting for an hour


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, postgres_server):
    root = tmp_path_factory.mktemp("fleet")
    with broker_with_topics() as broker:
        warehouse = f"file://{root}/warehouse"
        dags = root / "dags"
        dags.mkdir()
        (dags / "fleet.py").write_text(DAG_FILE)
        pipelines = [{"dag_id": f"fleet{i:02d}", "spec": spec_of(i).to_json(), "schedule": SCHEDULES.get(i, "*/5 * * * *"),
                      "kafka_conn_id": "silent_kafka" if SCENARIOS.get(i) == "kafka_silent" else "onceflow_kafka"}
                     for i in range(N)]
        (root / "pipelines.json").write_text(json.dumps(pipelines))
        airflow = onceflow_airflow(root / "airflow", broker, warehouse, postgres=postgres_server, dags_folder=dags,
                                   extra_env={**auth_env(root / "auth", USERS), "FLEET_PIPELINES": str(root / "pipelines.json"),
                                              "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True"})
        airflow.set_connection("silent_kafka", {"conn_type": "onceflow_kafka",
                                                "extra": {"bootstrap.servers": f"127.0.0.1:{pick_port(None)}"}})
        airflow.migrate()
        airflow.start(timeout=180)
        try:
            _wait_until_parsed(airflow.api_url)
            # written once Airflow is up, so that the ages the page shows are close to the ones written
            build_fleet(broker, warehouse, int(time.time() * 1000))
            yield airflow
        finally:
            airflow.stop(grace=2)


def _client(api: str) -> httpx.Client:
    client = httpx.Client(base_url=api, timeout=60)
    token = client.post("/auth/token", json={"username": "ada", "password": USERS["ada"][1]}).json()["access_token"]
    client.headers["Authorization"] = f"Bearer {token}"
    return client


def _wait_until_parsed(api: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    with closing(_client(api)) as ada:
        while len(ada.get("/onceflow/api/pipelines").json()["pipelines"]) < N:
            assert time.monotonic() < deadline, f"the {N} DAGs were not all parsed within {timeout:.0f} s"
            time.sleep(2)


def _server_timing(page) -> dict[str, float]:
    """The list's own Server-Timing entries and the browser's request-to-first-byte, in ms."""
    entry = page.evaluate("""() => { const n = performance.getEntriesByType("navigation")[0];
        return {server: Object.fromEntries(n.serverTiming.map(t => [t.name, t.duration])),
                browser: n.responseStart - n.requestStart}; }""")
    return {**entry["server"], "browser_request_to_first_byte": entry["browser"]}


@pytest.mark.slow  # its own Airflow with fifty DAGs: about two minutes
@pytest.mark.timeout(900)
def test_the_list_shows_each_pipelines_health_and_filters_those_that_need_a_person(fleet):
    chromium()
    from playwright.sync_api import expect

    api = fleet.api_url
    timings = []
    with browser_page() as page:
        _sign_in(page, api, "ada", "/onceflow/")
        page.wait_for_url(re.compile(r".*/onceflow/$"))
        timings.append(("first load", _server_timing(page)))
        # Kafka's answers come in the background: reload until every pipeline has one (the silent one's is its error).
        deadline = time.monotonic() + 60
        while page.locator("td.behind", has_text="asking Kafka").count():
            assert time.monotonic() < deadline, "Kafka's answers did not all come within 60 s"
            time.sleep(1)
            page.reload()
        for label in ("answered", "again"):
            page.reload()
            timings.append((label, _server_timing(page)))

        rows = page.locator("table.pipelines tr.pipeline")
        expect(rows).to_have_count(N)

        for dag_id, columns in SHOWN.items():
            for column, text in columns.items():
                expect(page.locator(f"tr#pipeline-{dag_id} td.{column}")).to_have_text(text)
        page.screenshot(path=str(SCREENSHOTS / "pipeline-list.png"), full_page=True)

        page.get_by_role("link", name=f"Needs a person ({len(NEEDS_PERSON)})").click()
        page.wait_for_url(re.compile(r".*/onceflow/\?needs=person$"))
        shown = {tr.get_attribute("id").removeprefix("pipeline-") for tr in page.locator("table.pipelines tr.pipeline").all()}
        assert shown == NEEDS_PERSON
        timings.append(("needs a person", _server_timing(page)))
        page.screenshot(path=str(SCREENSHOTS / "pipeline-list-needs-person.png"), full_page=True)

    with closing(_client(api)) as ada:
        answer = ada.get("/onceflow/api/pipelines", params={"needs_person": "true"})
    assert {p["dag_id"] for p in answer.json()["pipelines"]} == NEEDS_PERSON and answer.json()["needs_person"] == 6
    print(f"\nthe pipeline list at N={N} (ms):")
    for label, timing in timings:
        print(f"  {label}: " + ", ".join(f"{k} {v:.0f}" for k, v in timing.items()))

