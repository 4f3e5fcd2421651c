"""A killed or stopped service started by this process leaves no zombie behind: a zombie's pid counts
as alive, and PostgreSQL refused to start again over a lock file naming one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from onceflow_devkit.services.process import ManagedProcess, _reap, held_by_session


@pytest.mark.parametrize("end", ["kill", "stop"])
def test_a_service_ended_by_its_starter_is_reaped(tmp_path, end):
    proc = ManagedProcess("sleeper", tmp_path / "sleeper")
    pid = proc.start(["sleep", "60"], port=0, ready=lambda: True)
    assert getattr(proc, end)()
    assert not Path(f"/proc/{pid}").exists(), "the ended service is still a zombie of this process"


def test_a_child_killed_a_moment_ago_is_reaped_once_it_dies():
    """SIGKILL is not instant: a wait right after it finds the child still dying. The CI run that
    failed the test above had waited once, too early, and left a zombie."""
    child = subprocess.Popen(["sleep", "60"])
    os.kill(child.pid, signal.SIGKILL)
    _reap(child.pid)
    assert not Path(f"/proc/{child.pid}").exists(), "the killed child is still a zombie of this process"


def test_a_service_is_found_again_as_soon_as_start_returns(tmp_path):
    """Popen returns before the kernel shows the new program's environment, which is how a service is
    told from a stale pid file: a make test run met kill() right after start() finding nothing to kill."""
    for attempt in range(40):
        proc = ManagedProcess("sleeper", tmp_path / f"sleeper-{attempt}")
        pid = proc.start(["sleep", "60"], port=0, ready=lambda: True)
        assert proc.running_pid() == pid, f"attempt {attempt}: the service just started was not found"
        assert proc.kill()


def test_workers_port_shares_are_disjoint_below_the_ephemeral_range_and_a_pick_stays_in_its_share(monkeypatch):
    from onceflow_devkit.services import process

    shares = [process.port_share(w, 2) for w in range(2)]
    (a_low, a_high), (b_low, b_high) = [tuple(map(int, s.split("-"))) for s in shares]
    assert a_high < b_low and b_high < 32_768  # the kernel's ephemeral ports start at 32768
    monkeypatch.setenv(process.ANY_PORT_VAR, "1")
    monkeypatch.setenv(process.PORT_SHARE_VAR, shares[1])
    picked = [process.pick_port(9092) for _ in range(20)]
    assert all(b_low <= p <= b_high for p in picked) and len(set(picked)) == 20  # never handed out twice


def test_without_a_share_free_ports_are_distinct_and_never_handed_out_again(monkeypatch):
    from onceflow_devkit.services import process

    monkeypatch.delenv(process.PORT_SHARE_VAR, raising=False)
    first, second = process.free_ports(10), process.free_ports(10)
    assert len(set(first) | set(second)) == 20


@pytest.fixture
def listener():
    """A process of a session of its own listening on a port: (its pid, which leads the session, the port)."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import socket, time\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
         "print(s.getsockname()[1], flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        yield child.pid, int(child.stdout.readline())
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_a_port_is_told_held_by_its_own_session_another_or_nobody(listener):
    pid, port = listener
    assert held_by_session(port, pid) is True
    assert held_by_session(port, os.getsid(0)) is False  # the listener is not in this test's session
    with socket.socket() as unbound:
        unbound.bind(("127.0.0.1", 0))
        nobody = unbound.getsockname()[1]
    assert held_by_session(nobody, pid) is None


def test_a_file_closed_while_the_port_is_checked_does_not_make_the_service_a_stranger(listener, monkeypatch):
    """A restarted broker opens and closes log segments while its port is checked: a make test run took
    an fd gone between listing and reading for the broker gone, and refused the broker it had just started."""
    pid, port = listener
    readlink = os.readlink

    def closed_meanwhile(path):
        if Path(path).parent == Path(f"/proc/{pid}/fd") and Path(path).name == "0":
            raise FileNotFoundError(path)
        return readlink(path)

    monkeypatch.setattr(os, "readlink", closed_meanwhile)
    assert held_by_session(port, pid) is True
