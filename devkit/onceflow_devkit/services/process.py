"""One background service process: start, find again, stop.

Runs on the machine that hosts the embedded stack (a developer's laptop, CI).

Every service owns a directory ``<home>/<name>/`` holding::

    pid        the process id (the process leads its own session/group)
    port       the TCP port it listens on
    service.log stdout and stderr
    data/      whatever the service persists

A PID file can outlive its process (``kill -9`` of a test run, a reboot), and
the kernel can hand the same PID to an unrelated process later. So a PID
counts as ours only if that process carries ``ONCEFLOW_SERVICE_DIR=<dir>`` in
its environment, which we set at start and children inherit. Anything else is
a stale file and is removed.
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import psutil

from onceflow.ops.cli import CommandError

MARKER_VAR = "ONCEFLOW_SERVICE_DIR"
_PR_SET_PDEATHSIG = 1


class ServiceError(CommandError, RuntimeError):
    """A service could not be started or did not become ready."""


def write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by its owner only from its first byte, whole or not at all: it
    holds a secret (keys, a password). A file already there is replaced, whatever its mode was."""
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    staging.unlink(missing_ok=True)
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(staging, path)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


TCP_ESTABLISHED = "01"
TCP_LISTEN = "0A"


def tcp_sockets() -> Iterator[tuple[int, int, str, str]]:
    """This machine's TCP sockets, from /proc/net/tcp and tcp6: (local port, remote port, state
    as /proc writes it, inode); none where /proc cannot tell (not Linux)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            yield int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16), fields[3], fields[9]


def listening_sockets(port: int) -> set[str]:
    """The sockets listening on TCP ``port``, as /proc/<pid>/fd links name them; none where nobody
    listens or /proc cannot tell (not Linux)."""
    return {f"socket:[{inode}]" for local, _remote, state, inode in tcp_sockets() if state == TCP_LISTEN and local == port}


def _holds_any(process: Path, sockets: set[str]) -> bool:
    """Whether ``process`` (a /proc entry) has one of ``sockets`` open. A running service opens and closes
    files while we look: an fd gone between listing and reading is skipped, not taken for the process gone."""
    for fd in (process / "fd").iterdir():
        try:
            if os.readlink(fd) in sockets:
                return True
        except OSError:
            continue
    return False


def held_by_session(port: int, session: int) -> bool | None:
    """Whether a process of ``session`` listens on TCP ``port``: True; False only when a process outside
    it was found holding the port; None when nobody listens (yet) or /proc cannot tell whose it is.

    ``pick_port`` and the service's bind race: two stacks starting at once can
    both pick the same free port, and the loser's readiness check then reaches
    the winner's service. Linux only (/proc); elsewhere the check is skipped.
    """
    sockets = listening_sockets(port)
    if not sockets:
        return None
    held_elsewhere = False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The fields after the command name (which may hold spaces): state ppid pgrp session ...
            ours = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[3]) == session
            if (ours or not held_elsewhere) and _holds_any(entry, sockets):
                if ours:
                    return True
                held_elsewhere = True
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return False if held_elsewhere else None


# Set (to anything) where many stacks start side by side, as make test's worker processes do: two
# services that both find their usual port free would race for it, and one of them would fail.
ANY_PORT_VAR = "ONCEFLOW_ANY_PORT"
# "LOW-HIGH": the ports this process and its children take their services' ports from. make test's
# workers each get a share of their own below the kernel's ephemeral range: a port the kernel hands
# one worker (bind to port 0) is free to hand the other before the first service has bound it.
PORT_SHARE_VAR = "ONCEFLOW_PORT_SHARE"
_handed_out: set[int] = set()  # a port picked is not picked again by this process, bound yet or not


def port_share(worker: int, workers: int, low: int = 20_000, high: int = 32_000) -> str:
    """Worker ``worker``'s share (of ``workers``) of the ports ``low``..``high``, as ``PORT_SHARE_VAR`` spells it."""
    size = (high - low) // max(workers, 1)
    return f"{low + worker * size}-{low + (worker + 1) * size - 1}"


def _kernel_free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def pick_port(preferred: int | None, host: str = "127.0.0.1") -> int:
    """The preferred port when it is free (unless ``ONCEFLOW_ANY_PORT`` is set), otherwise a free port:
    of this process's share (``ONCEFLOW_PORT_SHARE``) when it has one, else any."""
    if preferred and not os.environ.get(ANY_PORT_VAR) and port_is_free(preferred, host):
        return preferred
    if share := os.environ.get(PORT_SHARE_VAR):
        low, _, high = share.partition("-")
        candidates = [p for p in range(int(low), int(high) + 1) if p not in _handed_out]
        random.shuffle(candidates)
        port = next((p for p in candidates if port_is_free(p, host)), None)
        if port is None:
            raise ServiceError(f"no free port left in {PORT_SHARE_VAR}={share}")
    else:
        port = _kernel_free_port(host)
        while port in _handed_out:  # free again, but a service this process started may not have bound it yet
            port = _kernel_free_port(host)
    _handed_out.add(port)
    return port


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports (``pick_port`` never hands out a port twice)."""
    return [pick_port(None, host) for _ in range(count)]


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: if the test process that
    # started us is SIGKILLed, the kernel kills us too instead of leaving an
    # orphan broker holding a port.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _process_environ(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The state letter follows the ')' that closes the command name.
            if stat.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                return None
        with open(f"/proc/{pid}/environ", "rb") as env:
            return env.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
        return None


def _reap(pid: int, timeout: float = 5.0) -> None:
    """Wait for ``pid`` if it is this process's child: a killed child stays a zombie until its parent
    waits, and a zombie's pid counts as alive (PostgreSQL refused to start again over a lock file
    naming one). A dying process stops showing its environment before it turns zombie, so one
    non-blocking wait can come too early: wait until it is reaped, for ``timeout`` seconds at most
    (a process stuck in the kernel never ends, and nothing should hang on it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            reaped, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # another process's child (its parent reaps it), or reaped already
            return
        if reaped or time.monotonic() > deadline:
            return
        time.sleep(0.02)


@dataclass
class ManagedProcess:
    name: str
    directory: Path

    @property
    def pid_file(self) -> Path:
        return self.directory / "pid"

    @property
    def port_file(self) -> Path:
        return self.directory / "port"

    @property
    def log_file(self) -> Path:
        return self.directory / "service.log"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    # -- discovery ---------------------------------------------------------
    def running_pid(self) -> int | None:
        """The PID of our live process, or None (stale files are removed)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        environ = _process_environ(pid)
        marker = f"{MARKER_VAR}={self.directory.resolve()}".encode()
        if environ is not None and marker in environ.split(b"\0"):
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def port(self) -> int | None:
        try:
            return int(self.port_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    # -- lifecycle ---------------------------------------------------------
    def reset(self) -> "ManagedProcess":
        """Stop whatever a killed earlier run left behind and wipe the directory."""
        self.stop(grace=2)
        shutil.rmtree(self.directory, ignore_errors=True)
        return self

    def start(
        self,
        argv: Sequence[str],
        port: int,
        ready: Callable[[], bool],
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        die_with_parent: bool = False,
    ) -> int:
        """Start ``argv`` in its own process group and wait until ``ready()``.

        Raises ServiceError with the log's tail when the process exits early
        or is not ready within ``timeout`` seconds.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        full_env = dict(os.environ if env is None else env)
        full_env[MARKER_VAR] = str(self.directory.resolve())
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                env=full_env,
                start_new_session=True,
                preexec_fn=_die_with_parent if die_with_parent else None,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        self.port_file.write_text(f"{port}\n")
        deadline = time.monotonic() + timeout
        laid_out_by = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise ServiceError(
                    f"{self.name} exited with code {proc.returncode} during start-up; "
                    f"log {self.log_file}:\n{self.log_tail()}"
                )
            if _process_environ(proc.pid) == b"" and time.monotonic() < laid_out_by:
                # Popen returns as exec begins, and /proc shows the new program's environment (our mark) only
                # once the kernel has laid it out: until then running_pid() would take it for a stale pid file.
                # Bounded: a program may rewrite that memory itself (setproctitle), as Airflow's processes do.
                time.sleep(0.005)
                continue
            try:
                answered = ready()
            except Exception:  # not up yet: any client error means "try again"
                answered = False
            if answered:
                if port and held_by_session(port, proc.pid) is False:
                    self.stop()
                    raise ServiceError(
                        f"{self.name}: port {port} answers, but not from the process just started: another "
                        "service took the port first (two stacks starting at once?). Start again: a free port "
                        f"is picked; log {self.log_file}:\n{self.log_tail()}"
                    )
                return proc.pid
            time.sleep(0.2)
        self.stop()
        raise ServiceError(
            f"{self.name} was not ready after {timeout:.0f} s; log {self.log_file}:\n{self.log_tail()}"
        )

    def kill(self, timeout: float = 30.0) -> bool:
        """SIGKILL the process, its process group and every descendant at once (what a crash does;
        a JVM's Python workers lead groups of their own), and wait until nobody listens on its port.

        A killed JVM's main thread turns zombie while its other threads still hold the
        listening socket (and /proc shows no owner for it); a new process started before
        then would reach the old one."""
        pid = self.running_pid()
        if pid is None:
            return False
        port = self.port()
        try:
            descendants = psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            descendants = []
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for child in descendants:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        deadline = time.monotonic() + timeout
        while _process_environ(pid) is not None or (port and listening_sockets(port)):
            if time.monotonic() > deadline:
                raise ServiceError(f"{self.name} (pid {pid}) still holds port {port} {timeout:.0f} s after SIGKILL")
            time.sleep(0.1)
        _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

    def stop(self, grace: float = 10.0) -> bool:
        """SIGTERM the process group, SIGKILL after ``grace`` seconds.

        Returns True if a process was running. Idempotent.
        """
        pid = self.running_pid()
        if pid is None:
            return False
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _process_environ(pid) is not None:
                time.sleep(0.1)
            if _process_environ(pid) is None:
                break
        _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

    def end(self, kill: bool, grace: float = 10.0) -> bool:
        """``kill()`` (a crash: everything SIGKILLed at once, returning once nobody listens on its port) or
        ``stop(grace)``: what a restart does first. Returns True if a process was running."""
        return self.kill() if kill else self.stop(grace=grace)
