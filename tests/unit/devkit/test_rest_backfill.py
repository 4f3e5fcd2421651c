"""How the harness's REST client creates a backfill when Airflow's SQLite is locked, and that it asks
once on PostgreSQL (client logic only: the answers are Airflow's, served by an httpx transport)."""

from __future__ import annotations

import httpx
import pytest

from onceflow_devkit.local_airflow import rest
from onceflow_devkit.local_airflow.errors import AirflowHarnessError
from onceflow_devkit.local_airflow.rest import LOCKED_CREATE_SETTLE_S, AirflowApi

LOCKED = (503, {"detail": "Database is locked. Backfill creation is not supported on SQLite under concurrent access."})
AUDIT_LOG_LOCKED = (500, {"detail": "Database error"})
ALREADY_RUNNING = (409, {"detail": "There is already a running backfill for dag d"})
CREATED = (200, {"id": 7, "dag_id": "d"})


def api_answering(*answers, sqlite: bool = True):
    """An API whose POST /api/v2/backfills answers ``answers`` in turn, and the posts made."""
    posts: list[httpx.Request] = []
    replies = iter(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        posts.append(request)
        status, body = next(replies)
        return httpx.Response(status, json=body)

    return AirflowApi("http://airflow.test", transport=httpx.MockTransport(handle), sqlite=sqlite), posts


@pytest.fixture
def sleeps(monkeypatch):
    taken: list[float] = []
    monkeypatch.setattr(rest.time, "sleep", taken.append)
    return taken


def test_a_creation_refused_as_locked_is_asked_again_after_the_killed_tasks_settle(sleeps):
    api, posts = api_answering(LOCKED, ALREADY_RUNNING, CREATED)
    assert api.create_backfill("d", "2026-01-01", "2026-01-02", reprocess_behavior="completed")["id"] == 7
    assert len(posts) == 3
    assert sleeps == [LOCKED_CREATE_SETTLE_S, 2]  # 409 after a refusal: Airflow's leftover backfill, wait it out


def test_a_locked_audit_log_did_nothing_and_is_asked_again_after_a_short_pause(sleeps):
    api, posts = api_answering(AUDIT_LOG_LOCKED, CREATED)
    assert api.create_backfill("d", "2026-01-01", "2026-01-02")["id"] == 7
    assert len(posts) == 2 and sleeps == [2]


def test_already_running_without_a_refusal_before_it_is_the_callers_error(sleeps):
    api, posts = api_answering(ALREADY_RUNNING)
    with pytest.raises(AirflowHarnessError, match="409"):
        api.create_backfill("d", "2026-01-01", "2026-01-02")
    assert len(posts) == 1 and sleeps == []


def test_on_postgresql_a_refusal_is_the_answer(sleeps):
    # Nothing but SQLite's lock refuses a creation with 503: elsewhere it is Airflow's error, reported as is.
    api, posts = api_answering(LOCKED, CREATED, sqlite=False)
    with pytest.raises(AirflowHarnessError, match="503"):
        api.create_backfill("d", "2026-01-01", "2026-01-02")
    assert len(posts) == 1 and sleeps == []
