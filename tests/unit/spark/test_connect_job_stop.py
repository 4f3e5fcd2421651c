"""ConnectBatchJob's stop flag (pure logic; the server side is tests/integration/spark/test_connect_batch.py)."""

from __future__ import annotations

import threading
import types

import pytest

from onceflow.spark import connect


class _Session:
    """What run() asks of a joined session, recorded."""

    session_id = "s-1"
    client = types.SimpleNamespace(close=lambda: None)

    def __init__(self):
        self.calls = []

    def addTag(self, tag):
        self.calls.append("addTag")

    def removeTag(self, tag):
        self.calls.append("removeTag")

    def interruptTag(self, tag):
        self.calls.append("interruptTag")
        return []

    def stop(self):
        self.calls.append("stop")


def test_a_job_stopped_while_it_joins_its_session_starts_no_query(monkeypatch):
    session = _Session()
    job = connect.ConnectBatchJob("sc://127.0.0.1:1", types.SimpleNamespace(spec=types.SimpleNamespace(name="p")), 3, [])

    def join_and_get_stopped(url, zips):
        # SIGTERM arrives while joining: on_kill finds no session to interrupt, and no job running yet
        job.interrupt()
        return session

    monkeypatch.setattr(connect, "join_session", join_and_get_stopped)
    monkeypatch.setattr("onceflow.spark.batch_job.run_batch", lambda *a, **k: pytest.fail("a query was started"))

    with pytest.raises(connect.JobStopped, match="before the job's first query"):
        job.run()
    assert session.calls == ["addTag", "interruptTag", "removeTag", "stop"] and not job.running


def test_a_client_close_that_never_returns_is_left_behind_not_waited_for(caplog):
    # gRPC's channel close waits for streams to end; one cut short by a task timeout may never end
    release = threading.Event()

    class _Hanging(_Session):
        client = types.SimpleNamespace(close=release.wait)

    session = _Hanging()
    try:
        connect.close_client(session, timeout_s=0.2)
    finally:
        release.set()
    assert session.release_session_on_close is False  # the next batch joins the session
    assert "did not close within" in caplog.text
    assert "stop" not in session.calls  # it would wait on the same channel
