"""The services a pytest process shares between its tests, and the check that runs after each test.

A session fixture that starts a service registers it here; after every test, each registered
service must still be up (its process alive and not stopped, its port answering). A test that
leaves one down or frozen fails itself, in its teardown, naming the service; the service is then
restarted where the fixture knows how, so the next test starts on a healthy stack.

Each check is a few system calls (``/proc`` and one TCP connect), not a request: a test of 0.1 s
must not pay for it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Callable

from onceflow_devkit.services.process import ManagedProcess


@dataclass
class SharedService:
    name: str
    processes: tuple[ManagedProcess, ...]
    ports: tuple[int, ...]
    restore: Callable[[], None] | None = None  # how the fixture brings it back, if it can


_REGISTERED: dict[str, SharedService] = {}


def register(service: SharedService) -> None:
    _REGISTERED[service.name] = service


def unregister(name: str) -> None:
    _REGISTERED.pop(name, None)


def process_state(pid: int) -> str:
    """The state letter /proc gives the process (R, S, T for stopped, Z...)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()[0].decode()


def problem(service: SharedService) -> str | None:
    """What is wrong with ``service``, or None when it is up."""
    for proc in service.processes:
        pid = proc.running_pid()
        if pid is None:
            return f"its process ({proc.name}) is gone"
        try:
            if process_state(pid) == "T":
                return f"its process ({proc.name}, pid {pid}) is stopped (SIGSTOP) and answers nobody"
        except OSError:
            return f"its process ({proc.name}) is gone"
    for port in service.ports:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except OSError as exc:
            return f"nothing answers on 127.0.0.1:{port} ({exc})"
    return None


def unhealthy() -> list[str]:
    """One line per registered service that is not up; each such service is restored where it can be."""
    found = []
    for service in list(_REGISTERED.values()):
        if (what := problem(service)) is None:
            continue
        restored = ""
        if service.restore is not None:
            try:
                service.restore()
                restored = "; restarted for the tests after this one"
            except Exception as exc:  # noqa: BLE001 - the report says the restart failed too
                restored = f"; restarting it failed: {exc}"
        found.append(f"{service.name}: {what}{restored}")
    return found
