"""Finding Airflow's processes again, although they rename themselves.

Runs in the calling process (test, CLI).

ManagedProcess recognises its process by a marker variable in
``/proc/<pid>/environ``. Airflow calls ``setproctitle`` (the api-server, the
LocalExecutor workers, ...), which on Linux reuses the memory that holds
``environ`` for the longer title: the marker vanishes and the process would
look dead while it still holds the port. So an Airflow component is also
recognised by what setproctitle cannot change: it leads its own session
(ManagedProcess starts it with ``setsid``) and its working directory is the
component's directory. Its descendants keep that session id (task
processes only change their process group), which is how stragglers are
found after a stop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from onceflow_devkit.services.process import MARKER_VAR, ManagedProcess


@dataclass(frozen=True)
class _ProcInfo:
    pid: int
    session: int
    cwd: str | None
    environ: list[bytes]


def _info(pid: int) -> _ProcInfo | None:
    """None for a dead, zombie or unreadable process."""
    proc = Path(f"/proc/{pid}")
    try:
        fields = (proc / "stat").read_bytes().rsplit(b")", 1)[1].split()
        if fields[0] == b"Z":
            return None
        environ = (proc / "environ").read_bytes().split(b"\0")
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            cwd = None
        return _ProcInfo(pid, int(fields[3]), cwd, environ)
    except (OSError, IndexError, ValueError):
        return None


class AirflowProcess(ManagedProcess):
    """A ManagedProcess that stays recognisable after ``setproctitle``."""

    def running_pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        info = _info(pid)
        if info is not None and info.session == pid and info.cwd == str(self.directory.resolve()):
            return pid
        return super().running_pid()  # the environ marker; removes a stale PID file


def stray_processes(root: Path, sessions: Iterable[int] = ()) -> list[int]:
    """Live processes (not this one) that belong to Airflow components under ``root``.

    A process belongs when its environ marker names a directory under
    ``root``, or it is in one of ``sessions`` (PIDs of component session
    leaders, which their descendants keep even after the leader died). The
    working directory alone is no proof: a user's shell may sit there.
    """
    root_str = str(Path(root).resolve())
    marker = f"{MARKER_VAR}={root_str}".encode()
    sessions = set(sessions)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        info = _info(int(entry.name))
        if info is None:
            continue
        if info.session in sessions or any(var == marker or var.startswith(marker + b"/") for var in info.environ):
            found.append(info.pid)
    return found
