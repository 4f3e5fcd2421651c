"""The REST client's waiting rules against a server that sometimes does not answer (pure logic: httpx.MockTransport)."""

from __future__ import annotations

import json

import httpx
import pytest

from onceflow_devkit.local_airflow import rest
from onceflow_devkit.local_airflow.errors import AirflowHarnessError


class FlakyAirflow:
    """Answers like /api/v2 but drops the answers listed in ``lose`` (the request still takes effect)."""

    def __init__(self, lose: set[int]):
        self.lose = lose
        self.requests = 0
        self.runs: dict[str, str] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if request.method == "POST":
            run_id = json.loads(request.content)["dag_run_id"]
            response = (httpx.Response(409, json={"detail": "exists"}) if run_id in self.runs
                        else httpx.Response(200, json={"dag_run_id": run_id}))
            self.runs.setdefault(run_id, "queued")
        elif "/dagRuns/" in request.url.path:
            response = httpx.Response(200, json={"state": self.runs[request.url.path.rsplit("/", 1)[-1]]})
            self.runs = {k: "success" for k in self.runs}
        else:
            response = httpx.Response(200, json={"dag_id": request.url.path.rsplit("/", 1)[-1]})
        if self.requests in self.lose:
            raise httpx.ReadTimeout("timed out", request=request)
        return response


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(rest.time, "sleep", lambda s: None)


def api(server: FlakyAirflow) -> rest.AirflowApi:
    return rest.AirflowApi("http://airflow.invalid", transport=httpx.MockTransport(server))


def test_a_trigger_whose_answer_was_lost_is_resent_and_creates_one_run():
    server = FlakyAirflow(lose={1})
    run_id = api(server).trigger("d", conf={"x": 1})
    assert list(server.runs) == [run_id] and server.requests == 2
    assert run_id.startswith("manual__")


def test_a_run_id_the_caller_reuses_is_still_refused():
    server = FlakyAirflow(lose=set())
    client = api(server)
    run_id = client.trigger("d", run_id="r1")
    with pytest.raises(AirflowHarnessError, match="HTTP 409"):
        client.trigger("d", run_id=run_id)


def test_wait_for_run_rides_out_polls_the_server_did_not_answer():
    server = FlakyAirflow(lose={2, 3})
    client = api(server)
    run_id = client.trigger("d")
    assert client.wait_for_run("d", run_id, timeout=60) == "success"


def test_a_server_that_never_answers_fails_at_the_deadline_with_the_cause():
    server = FlakyAirflow(lose=set(range(1, 10_000)))
    with pytest.raises(AirflowHarnessError, match="did not answer .*ReadTimeout"):
        api(server).wait_for_dag("d", timeout=0)
