"""The onceflow page in Airflow's UI: a real api-server with the plugin from
its entry point, real runs of the clickstream DAG (one aborted by a Spark
failure, its replay committed, one whose commit crashed after the COMMIT
decision, leaving its Kafka transactions open), Airflow's own auth, and a
real browser (Debian's chromium driven by Playwright).

Screenshots land in .onceflow/test-output/ui/ (README's comes from there).
Three `airflow dags test` runs, then one server start.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import socket
import threading
import time
from contextlib import closing
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from onceflow_devkit.local_airflow.auth import auth_env
from onceflow_devkit.local_airflow.rest import AirflowApi
from onceflow.config.warehouse_layout import quarantine_dir
from onceflow.core.ledger.ledger import BATCH_EFFECT
from onceflow.storage.local import local_path
from onceflow.core.planning.run_inputs import RunInputs
from tests.system.e2e.browser import SCREENSHOTS, browser_page, chromium, sign_in
from tests.system.e2e.conftest import broker_with_topics, make_world

DAG_ID = "clickstream_exactly_once"
CONF = {"max_records_per_partition": 10_000}
USERS = {"ada": ("viewer", "ada-secret"), "eve": ("viewer", "eve-secret"), "grace": ("user", "grace-secret")}
DENIED = {"eve": [DAG_ID]}  # signed in, but may not read this DAG
DAG_ROUTES = (
    f"/onceflow/api/pipelines/{DAG_ID}",
    f"/onceflow/api/pipelines/{DAG_ID}/batches?limit=2",
    f"/onceflow/dags/{DAG_ID}",
)


def _import_whole_package(package) -> None:
    """Every module of ``package``, now. pytest rewrites schemathesis (a pytest plugin) as each module is
    imported, and CPython 3.11.7's ast.parse fails ("AST constructor recursion depth mismatch") when that
    happens deep in a test's stack, as schemathesis' lazy imports did: at collection the stack is shallow."""
    for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}.", onerror=lambda name: None):
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional part whose own dependency is not installed: never imported later either
            pass


_import_whole_package(schemathesis)


class StatsdListener:
    """A real StatsD UDP socket on 127.0.0.1: every datagram Airflow's metrics send."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                self.lines.extend(self.socket.recv(65535).decode().splitlines())
            except socket.timeout:
                continue

    def env(self) -> dict[str, str]:
        return {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(self.port), "AIRFLOW__METRICS__STATSD_PREFIX": "airflow"}

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.socket.close()


@pytest.fixture(scope="module")
def statsd():
    listener = StatsdListener()
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def page_world(tmp_path_factory, statsd, spark_connect_server, postgres_server, e2e_rest_catalog):
    root = tmp_path_factory.mktemp("ui")
    with broker_with_topics() as broker:
        # The spark tasks are Spark Connect clients: the page does not depend on the mode, and it is the quicker one.
        world = make_world(broker, root, postgres_server, {**auth_env(root / "auth", USERS, DENIED), **statsd.env()}, spark_connect_server,
                           catalog=e2e_rest_catalog)
        world.produce(600, seed=11)
        with world.faults("job.after_votes=raise"):
            aborted = world.airflow.dags_test(DAG_ID, conf=CONF, timeout=900)
        assert aborted.run_state == "failed" and aborted.tasks["rollback"] == "success", aborted.describe()
        replay = world.airflow.dags_test(DAG_ID, conf=CONF, timeout=900)
        assert replay.succeeded, replay.describe()
        world.produce(200, seed=12)
        with world.faults("commit.effect.before=crash"):
            left_open = world.airflow.dags_test(DAG_ID, conf=CONF, timeout=900)
        assert not left_open.succeeded and left_open.tasks["spark"] == "success", left_open.describe()
        world.airflow.start(timeout=180)
        _wait_until_parsed(world)
        try:
            yield world, {"aborted": aborted.run_id, "committed": replay.run_id, "open": left_open.run_id}
        finally:
            world.airflow.stop(grace=2)


def _wait_until_parsed(world, timeout: float = 120.0) -> None:
    """The page lists DAGs the DAG processor has parsed (not stale): wait for that."""
    deadline = time.monotonic() + timeout
    with closing(_client(world, "ada")) as ada:
        while (answer := ada.get(f"/api/v2/dags/{DAG_ID}")).status_code != 200 or answer.json().get("is_stale"):
            assert time.monotonic() < deadline, f"{DAG_ID} not parsed within {timeout:.0f} s: {answer.text[:300]}"
            time.sleep(1)


def _client(world, user: str | None = None, token: str | None = None) -> httpx.Client:
    client = httpx.Client(base_url=world.airflow.api_url, timeout=60)
    if user:
        answer = client.post("/auth/token", json={"username": user, "password": USERS[user][1]})
        assert answer.status_code == 201, answer.text
        token = answer.json()["access_token"]
    if token:
        client.headers["Authorization"] = f"Bearer {token}"
    return client


def test_every_route_answers_only_to_a_user_airflow_lets_read_the_dag(page_world):
    world, runs = page_world
    routes = (*DAG_ROUTES, f"/onceflow/api/pipelines/{DAG_ID}/runs/{quote(runs['committed'], safe='')}")
    with closing(_client(world)) as anonymous, closing(_client(world, token="not-a-jwt")) as forged, \
            closing(_client(world, "eve")) as eve, closing(_client(world, "ada")) as ada:
        for route in routes:
            assert anonymous.get(route).status_code == 401, route
            assert forged.get(route).status_code == 403, route
            assert eve.get(route).status_code == 403, route
            assert ada.get(route).status_code == 200, route
        assert anonymous.get("/onceflow/api/pipelines").status_code == 401
        assert anonymous.get("/onceflow/").status_code == 401
        assert anonymous.get("/onceflow/openapi.json").status_code == 404  # no schema served to anyone
        # The DAGs folder also holds the hourly example, which eve may read.
        assert DAG_ID not in [p["dag_id"] for p in eve.get("/onceflow/api/pipelines").json()["pipelines"]]
        assert {"dag_id": DAG_ID, "pipeline": "clickstream"} in ada.get("/onceflow/api/pipelines").json()["pipelines"]


def test_the_api_shows_states_ranges_counts_lag_and_open_transactions(page_world):
    world, runs = page_world
    with closing(_client(world, "ada")) as ada:
        view = ada.get(f"/onceflow/api/pipelines/{DAG_ID}").json()
        run = ada.get(f"/onceflow/api/pipelines/{DAG_ID}/runs/{quote(runs['committed'], safe='')}").json()
        older = ada.get(f"/onceflow/api/pipelines/{DAG_ID}/batches", params={"before": 2, "limit": 5}).json()
    open_batch, committed, aborted = view["batches"]
    assert [b["state"] for b in view["batches"]] == ["committing", "committed", "aborted"], view["batches"]
    assert [b["run_id"] for b in view["batches"]] == [runs["open"], runs["committed"], runs["aborted"]]
    assert view["latest"]["batch"] == open_batch["batch"] == "0000000003"
    # the replay read exactly the aborted batch's ranges; every record went to one of the two Kafka outputs
    assert committed["replay_of"] == 1 and committed["ranges"] == aborted["ranges"] and committed["records"] == 600
    assert committed["votes"]["clicks_enriched"] + committed["votes"]["clicks_dead_letter"] == 600
    assert committed["dead_letters"] == committed["votes"]["clicks_dead_letter"] > 0
    assert "presumed abort" not in aborted["reason"] and aborted["decision"] == "ABORT"
    assert set(committed["stages_ms"]) == {"waiting for Spark", "pre-commit", "decision", "commit or abort"}
    # batch 3 decided COMMIT, then its commit task died: both Kafka outputs' transactions are still open
    assert open_batch["decision"] == "COMMIT" and open_batch["records"] == 200
    assert [b["backlog"] for b in view["batches"]] == [200, None, 600]  # a replay re-reads ranges: no new lag reading
    txns = view["open_transactions"]
    assert {t["sink"] for t in txns} == {"clicks_enriched", "clicks_dead_letter"} and txns == open_batch["open_transactions"]
    for t in txns:
        assert t["batch"] == "0000000003" and 0 < t["remaining_ms"] <= t["timeout_ms"] and 0 <= t["used"] < 1
        assert t["deadline_ms"] == t["started_ms"] + t["timeout_ms"]
    # the 200 records of the undecided batch are the input's lag
    assert sum(row["lag"] for row in view["lag"]) == 200 and view["lag_error"] is None
    assert all(row["oldest_uncommitted_age_s"] is not None for row in view["lag"] if row["lag"])
    assert run["batch"]["batch"] == "0000000002" and run["batch"]["state"] == "committed"
    assert [b["batch"] for b in older["batches"]] == ["0000000001"] and older["next_before"] is None


def test_only_the_committed_batch_is_announced_to_downstream_dags(page_world):
    world, runs = page_world
    with closing(_client(world, "ada")) as ada:
        answer = ada.get("/api/v2/assets/events", params={"limit": 100})
    assert answer.status_code == 200, answer.text
    events = [e for e in answer.json()["asset_events"] if (e.get("extra") or {}).get("pipeline") == "clickstream"]
    # batch 1 was aborted and batch 3 is still committing: one event per output of batch 2, with what it committed
    assert sorted((e["extra"]["batch_id"], e["extra"]["output"]) for e in events) == [
        ("0000000002", "clicks_dead_letter"), ("0000000002", "clicks_enriched"), ("0000000002", "page_minute_counts"),
        ("0000000002", "page_minute_table")]
    facts = events[0]["extra"]
    assert facts["records_in"] == 600 and facts["replay_of"] == 1 and len(facts["ranges"]) == 2
    assert sum(facts["records_out"][name] for name in ("clicks_enriched", "clicks_dead_letter")) == 600


def test_batches_report_to_airflow_metrics_on_a_real_statsd_socket(page_world, statsd):
    lines = [line for line in statsd.lines if line.startswith("airflow.onceflow.clickstream.")]
    metrics = {}
    for line in lines:
        name, _, rest = line.partition(":")
        metrics.setdefault(name[len("airflow.onceflow.clickstream."):], []).append(rest)
    assert metrics.get("batches.aborted") == ["1|c"] and metrics.get("batches.committed") == ["1|c"], lines
    assert metrics["records_in"] == ["600|g"], lines
    out = {k.split(".", 1)[1]: int(v[0].split("|")[0]) for k, v in metrics.items() if k.startswith("records_out.")}
    assert out["clicks_enriched"] + out["clicks_dead_letter"] == 600 and out["page_minute_counts"] > 0, out
    for stage in ("waiting_for_spark", "pre-commit", "decision", "commit_or_abort"):
        assert any(v.endswith("|ms") for v in metrics.get(f"stage.{stage}", [])), (stage, sorted(metrics))
    age = float(metrics["transaction_age_at_decision"][0].split("|")[0])
    assert 0 < age < 0.5, age  # well inside the Kafka sinks' transaction timeout
    assert "input_lag" in metrics and "input_lag.clicks.0" in metrics, sorted(metrics)


def _sign_in(page, api: str, user: str, then: str) -> None:
    sign_in(page, api, user, USERS[user][1], then)


def test_the_page_in_a_browser(page_world):
    chromium()
    from playwright.sync_api import expect

    world, runs = page_world
    api = world.airflow.api_url
    with browser_page() as page:
        # sign in with Airflow's own login form, then open onceflow from the navigation
        _sign_in(page, api, "ada", "/plugin/onceflow")
        page.wait_for_url(re.compile(r".*/plugin/onceflow.*"))
        frame = page.frame_locator("iframe")
        frame.get_by_role("link", name=DAG_ID).click()

        batches = frame.locator("table.batches")
        expect(batches.locator("#batch-0000000003")).to_contain_text("committing")
        expect(batches.locator("#batch-0000000002")).to_contain_text("committed")
        expect(batches.locator("#batch-0000000002")).to_contain_text("replays 0000000001")
        expect(batches.locator("#batch-0000000001")).to_contain_text("aborted")
        expect(batches.locator("#batch-0000000002")).to_contain_text("600")
        expect(batches.locator("#batch-0000000002")).to_contain_text("clicks[0] 0..")
        countdowns = frame.locator("table.transactions td.countdown")
        expect(countdowns).to_have_count(4)  # two Kafka outputs, two splits each
        expect(countdowns.first).to_have_text(re.compile(r"^\d+:\d\d left \(\d+% used\)$"))
        expect(frame.locator("table.lag")).to_contain_text("clicks[0]")
        expect(frame.locator("figure")).to_have_count(3)
        page.screenshot(path=str(SCREENSHOTS / "pipeline.png"), full_page=True)

        # the per-run view, from the DAG run's own page in Airflow
        page.goto(f"{api}/dags/{DAG_ID}/runs/{quote(runs['committed'], safe='')}")
        page.get_by_role("link", name=re.compile("onceflow batch")).first.click()
        page.wait_for_url(re.compile(r".*/plugin/onceflow-batch$"))
        run_view = page.frame_locator("iframe")
        expect(run_view.locator("h1")).to_have_text(f"Batch 0000000002 of run {runs['committed']}")
        expect(run_view.locator("p.latest")).to_contain_text("committed")
        page.screenshot(path=str(SCREENSHOTS / "run.png"), full_page=True)


# Last in this module: it changes the pipeline the tests above read.
def test_an_operator_splits_the_failing_batch_from_the_page(page_world):
    chromium()
    from playwright.sync_api import expect

    world, _runs = page_world
    api = world.airflow.api_url
    coordinator = world.runtime.coordinator
    # Batch 3 is committed by recovery (as the next run would do), then batch 4 fails and is rolled back: the latest
    # batch, aborted, which an operator wants to replay smaller.
    assert coordinator.recover(3).state.value == "committed"
    world.produce(300, seed=13)
    with world.runtime.offset_source() as source:
        failing = coordinator.plan_next(source, world.runtime.plan_config(RunInputs(**CONF)), run_id="manual__failing")
    assert coordinator.rollback(failing.batch_seq, "the spark task failed on every try").state.value == "aborted"
    split, skip = (f"/onceflow/api/pipelines/{DAG_ID}/batches/4/{action}" for action in ("split", "skip"))
    order = {"records": 50, "reason": "poison record in clicks[0]"}

    with closing(_client(world)) as anonymous, closing(_client(world, "ada")) as ada, \
            closing(_client(world, "eve")) as eve, closing(_client(world, "grace")) as grace:
        assert anonymous.post(split, json=order).status_code == 401
        assert ada.post(split, json=order).status_code == 403  # may read the runs, not run the DAG
        assert eve.post(split, json=order).status_code == 403
        # what a form on another site can send, with grace's cookie: no JSON, refused
        assert grace.post(split, content=b"records=50&reason=x", headers={"Content-Type": "application/x-www-form-urlencoded"}).status_code == 422
        # a reason that says nothing (blank to Python's eye: \x1c is whitespace to str.strip, not to a regex's \s)
        blank = grace.post(skip, json={"reason": " \x1c"})
        assert blank.status_code == 422 and "is blank" in blank.text, blank.text
        # (dags test runs leave the DAG as created, paused: unpaused, as a scheduled pipeline is)
        assert grace.patch(f"/api/v2/dags/{DAG_ID}", json={"is_paused": False}).status_code == 200
        refused = grace.post(split, json=order)
        assert refused.status_code == 409 and "pause the DAG" in refused.json()["detail"], refused.text
        assert "section class=\"intervene\"" not in ada.get(f"/onceflow/dags/{DAG_ID}").text  # no form for a viewer
        assert grace.patch(f"/api/v2/dags/{DAG_ID}", json={"is_paused": True}).status_code == 200
        # The warehouse fails during a skip (a file where the batch's quarantine directory goes): 503, naming it.
        blocked = local_path(quarantine_dir(world.warehouse, world.runtime.spec.name, failing.batch_id))
        blocked.parent.mkdir(parents=True, exist_ok=True)
        blocked.write_text("not a directory")
        try:
            failed = grace.post(skip, json={"reason": "give up"})
        finally:
            blocked.unlink()
        assert failed.status_code == 503, failed.text
        assert failed.json()["detail"].startswith("NotADirectoryError") and str(blocked) in failed.json()["detail"]
    assert coordinator.describe(4).intervention is None  # nothing recorded by the refusals or the failed skip

    with browser_page() as page:
        _sign_in(page, api, "grace", f"/onceflow/dags/{DAG_ID}")
        page.wait_for_url(re.compile(rf".*/onceflow/dags/{DAG_ID}$"))
        form = page.locator('section.intervene form[data-action="split"]')
        form.locator('input[name="records"]').fill(str(order["records"]))
        form.locator('input[name="reason"]').fill(order["reason"])
        page.locator("section.intervene").screenshot(path=str(SCREENSHOTS / "split-form.png"))
        form.get_by_role("button", name="Split batch 0000000004").click()
        expect(page.locator("#batch-0000000004 .intervention")).to_have_text(
            "split to 50 per partition by grace: poison record in clicks[0]")
        expect(page.locator("section.intervene")).to_have_count(0)  # one intervention per batch
        page.screenshot(path=str(SCREENSHOTS / "split.png"), full_page=True)

    recorded = coordinator.describe(4).intervention
    assert (recorded.action.value, recorded.by, recorded.reason, recorded.max_records_per_partition) == (
        "split", "grace", order["reason"], 50)
    with closing(_client(world, "grace")) as grace:
        again = grace.post(skip, json={"reason": "give up"})
    assert again.status_code == 409 and "already intervened" in again.json()["detail"], again.text
    # The next plan follows it: batch 4's ranges again, at most 50 records per partition.
    with world.runtime.offset_source() as source:
        replay = coordinator.plan_next(source, world.runtime.plan_config(RunInputs(**CONF)), run_id="manual__replay")
    assert replay.intervention == recorded.note()
    assert [(r.partition, r.start) for r in replay.ranges] == [(r.partition, r.start) for r in failing.ranges]
    assert all(r.size <= 50 for r in replay.ranges) and replay.records > 0


def test_the_pages_api_answers_any_input_without_a_server_error_and_leaves_committed_batches_as_they_are(page_world):
    """Every route of the page's API (its FastAPI schema, which the server does not publish) fuzzed
    by schemathesis against the real api-server, as a signed-in user who may split and skip."""
    from onceflow.airflow.ui.app import app

    world, _ = page_world
    coordinator = world.runtime.reader
    committed = {seq: coordinator.describe(seq) for seq in range(1, coordinator.latest_seq() + 1)}
    committed = {seq: s.decision for seq, s in committed.items() if s.state.value == "committed"}
    schema = schemathesis.openapi.from_dict(app.openapi())
    with closing(_client(world, "grace")) as grace:
        headers = {"Authorization": grace.headers["Authorization"]}
        for result in schema.get_all_operations():
            operation = result.ok()

            @settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy())
            def answered(case):
                response = case.call(base_url=f"{world.airflow.api_url}/onceflow", headers=headers, timeout=60)
                case.validate_response(response, checks=[not_a_server_error])

            answered()
    after = {seq: coordinator.describe(seq).decision for seq in committed}
    assert after == committed
    report = world.audit()
    assert report.ok, report.summary()


def test_a_batch_finished_outside_airflow_is_announced_by_the_next_runs_plan_task(page_world):
    """Batch 3 was finished by recovery outside Airflow (as ``onceflow recover`` does, in the split
    test above): no task emitted its events. The next run's plan task finds none carries it and
    announces it, once, beside the events of the run's own batch."""
    world, runs = page_world
    assert not world.runtime.coordinator.describe(3).done[BATCH_EFFECT].done_by.startswith("airflow:")
    with AirflowApi(world.airflow.api_url, "grace", USERS["grace"][1]) as api:  # may run the DAG
        # The `airflow dags test` process whose commit crashed left its run "running": one run at a time.
        api.set_run_state(DAG_ID, runs["open"], "failed")
        api.unpause(DAG_ID)
        run_id = api.trigger(DAG_ID, conf=CONF)
        assert api.wait_for_run(DAG_ID, run_id, timeout=300) == "success", api.explain(DAG_ID, run_id)
        assert "batch 0000000003 of clickstream announced to the DAGs downstream" in api.task_log(DAG_ID, run_id, "plan")
        api.pause(DAG_ID)
    batch = world.runtime.batch_of_run(run_id)
    with closing(_client(world, "ada")) as ada:
        answer = ada.get("/api/v2/assets/events", params={"limit": 100})
    events = [e["extra"] for e in answer.json()["asset_events"] if (e.get("extra") or {}).get("pipeline") == "clickstream"]
    announced = sorted((e["batch_id"], e["output"]) for e in events)
    outputs = ["clicks_dead_letter", "clicks_enriched", "page_minute_counts", "page_minute_table"]
    assert announced == sorted((b, o) for b in ("0000000002", "0000000003", batch.batch_id) for o in outputs), announced
