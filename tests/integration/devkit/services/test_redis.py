"""The dev kit's Redis (the Celery executor's broker) asks for its password, which stays off its
command line."""

from __future__ import annotations

import socket
import stat

import psutil

from onceflow_devkit.services.process import ManagedProcess
from onceflow_devkit.services.redis import start_redis


def test_the_broker_answers_only_with_its_password_kept_in_a_private_file(tmp_path):
    proc = ManagedProcess("redis", tmp_path / "redis").reset()
    server = start_redis(proc, die_with_parent=True)
    try:
        with socket.create_connection((server.host, server.port), timeout=5) as conn:
            conn.sendall(b"PING\r\n")
            assert conn.recv(128).startswith(b"-NOAUTH")
        assert server.ping()
        pid = proc.running_pid()
        assert pid is not None  # found again by its marker, so stop() can end it
        assert not any(server.password in part for part in psutil.Process(pid).cmdline())
        assert stat.S_IMODE((proc.directory / "redis.conf").stat().st_mode) == 0o600
        assert server.password not in repr(server)
    finally:
        proc.stop(grace=2)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
