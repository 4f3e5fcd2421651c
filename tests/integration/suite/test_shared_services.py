"""The check that runs after every test: a shared service left down or frozen is named, and brought back."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
import uuid

import pytest

from onceflow_devkit.services.process import ManagedProcess, pick_port
from tests.conftest import TEST_HOME
from tests.shared_services import SharedService, problem, process_state, register, unhealthy, unregister


@pytest.fixture
def listener():
    """A small server (Python's http.server) on a free port, as a fixture would start a service."""
    proc = ManagedProcess("listener", TEST_HOME / f"listener-{uuid.uuid4().hex[:6]}").reset()
    port = pick_port(None)

    def start():
        proc.start([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)], port,
                   ready=lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() is None)

    start()
    yield proc, port, start
    proc.stop(grace=0)


def test_a_healthy_service_passes(listener):
    proc, port, _ = listener
    assert problem(SharedService("listener", (proc,), (port,))) is None


def test_a_frozen_service_is_named_and_restored_for_the_next_test(listener):
    proc, port, start = listener
    service = SharedService("listener", (proc,), (port,), restore=lambda: (proc.stop(grace=0), start()))
    register(service)
    try:
        pid = proc.running_pid()
        os.kill(pid, signal.SIGSTOP)  # a hung server: the kernel still accepts its connections
        deadline = time.monotonic() + 5
        while process_state(pid) != "T":  # the signal is delivered when the process is next scheduled
            assert time.monotonic() < deadline, f"pid {pid} did not stop"
            time.sleep(0.01)
        [line] = unhealthy()
        assert line.startswith("listener: its process (listener, pid ") and "is stopped (SIGSTOP)" in line, line
        assert line.endswith("restarted for the tests after this one"), line
        assert problem(service) is None and unhealthy() == []
    finally:
        unregister("listener")


def test_a_dead_service_is_named_with_what_is_gone(listener):
    proc, port, _ = listener
    proc.stop(grace=0)
    assert problem(SharedService("listener", (proc,), (port,))) == "its process (listener) is gone"
    assert problem(SharedService("port-only", (), (port,))).startswith(f"nothing answers on 127.0.0.1:{port}")
