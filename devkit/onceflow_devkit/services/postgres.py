"""The dev kit's one PostgreSQL server: Debian's package, a cluster of its own on 127.0.0.1.

Two-phase commit needs ``max_prepared_transactions`` above 0 (PostgreSQL's
default is 0, which refuses PREPARE TRANSACTION). The cluster asks for a
password over TCP (scram-sha-256), so a client that forgets its secret fails
as it would in production. It listens on TCP alone, no Unix socket: a socket's
path may not pass 107 bytes, and one under a checkout in a long folder kept the
server from starting. The server refuses to run as root: as root it runs
as Debian's ``postgres`` user, which owns the cluster's directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from onceflow_devkit.services.process import ManagedProcess, ServiceError, pick_port

DEFAULT_PORT = 55432
USER = "onceflow"
PASSWORD = "onceflow-pg-secret"  # the embedded stack's; never a production credential
DATABASE = "postgres"
CONN_ID = "onceflow_postgres"  # the Airflow connection the dev kit gives the server (the shop example's payments)
# Prepared transactions a server keeps at once: a batch's splits, zombies and the chaos run's concurrency.
MAX_PREPARED_TRANSACTIONS = 64
# Airflow's components pool their connections (its metadata database is here too): PostgreSQL's 100 is tight.
MAX_CONNECTIONS = 300
INSTALL_HINT = "install Debian's package (apt-get install postgresql) or set ONCEFLOW_POSTGRES_BIN to its bin directory"


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str = USER
    password: str = field(default=PASSWORD, repr=False)
    database: str = DATABASE

    def uri(self) -> str:
        """The server as an Airflow connection URI (``AIRFLOW_CONN_<ID>``): it holds the password."""
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"

    def connection(self) -> dict:
        """The server as an Airflow connection (JSON form)."""
        return {"conn_type": "postgres", "host": self.host, "port": self.port, "login": self.user,
                "password": self.password, "schema": self.database}

    def connect(self, **kwargs):
        import psycopg

        return psycopg.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                               dbname=self.database, **kwargs)


def postgres_bin() -> Path:
    """The bin directory of the newest PostgreSQL installed from Debian's packages."""
    configured = os.environ.get("ONCEFLOW_POSTGRES_BIN")
    candidates = [Path(configured)] if configured else sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    for directory in reversed(candidates):
        if (directory / "postgres").exists() and (directory / "initdb").exists():
            return directory
    raise ServiceError(f"PostgreSQL's server (postgres, initdb) was not found: {INSTALL_HINT}")


def _as_server_user(argv: list[str], die_with_parent: bool = False) -> list[str]:
    """PostgreSQL will not run as root: run it as Debian's ``postgres`` user then. setpriv execs in
    place (the PID started is the server's) and sets the parent-death signal after the user change,
    which would otherwise clear it."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        raise ServiceError("running as root, PostgreSQL needs setpriv (util-linux) to start as user postgres")
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
            *(["--pdeathsig=KILL"] if die_with_parent else []), "--", *argv]


def _hand_over(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


def _check_reachable(directory: Path) -> None:
    """Fail fast when the server's user cannot reach ``directory`` (a 0700 directory above it)."""
    if os.geteuid() != 0:
        return
    if subprocess.run(_as_server_user(["test", "-x", str(directory)]), capture_output=True).returncode != 0:
        raise ServiceError(
            f"PostgreSQL runs as user postgres, which cannot reach {directory}: a directory above it is closed to "
            "other users. Keep the dev kit's state (ONCEFLOW_HOME) where other users may pass through")


def _init_cluster(bin_dir: Path, data: Path) -> None:
    if (data / "PG_VERSION").exists():
        return
    data.mkdir(parents=True, exist_ok=True)
    _hand_over(data)
    password_file = data.parent / "pwfile"
    password_file.write_text(PASSWORD + "\n")
    _hand_over(password_file)
    try:
        done = subprocess.run(
            _as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={password_file}",
                             "--auth-host=scram-sha-256", "--auth-local=peer", "--encoding=UTF8", "--no-sync"]),
            capture_output=True, text=True)
    finally:
        password_file.unlink(missing_ok=True)
    if done.returncode != 0:
        raise ServiceError(f"initdb failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def start_postgres(proc: ManagedProcess, die_with_parent: bool = False, port: int | None = None) -> PostgresServer:
    """A PostgreSQL cluster in ``proc``'s data directory, started (or made first) on 127.0.0.1."""
    bin_dir = postgres_bin()
    proc.directory.mkdir(parents=True, exist_ok=True)
    _check_reachable(proc.directory)
    data = proc.data_dir / "cluster"
    _init_cluster(bin_dir, data)
    port = port or pick_port(DEFAULT_PORT)
    server = PostgresServer("127.0.0.1", port)

    def ready() -> bool:
        with server.connect(connect_timeout=2) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)

    proc.start(
        _as_server_user([str(bin_dir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
                         "-k", "", "-c", f"max_prepared_transactions={MAX_PREPARED_TRANSACTIONS}",  # -k '': no socket
                         "-c", f"max_connections={MAX_CONNECTIONS}",
                         "-c", "fsync=off"],  # a test cluster: a process crash loses nothing, only the OS's would
                        die_with_parent),
        port=port, ready=ready, timeout=60, die_with_parent=die_with_parent,
    )
    return server


@dataclass
class RestartablePostgres:
    """A PostgreSQL server of its own that a chaos run crashes and starts again on the same port:
    every process of it SIGKILLed at once, as a machine's OOM killer or a power cut would (with
    ``fsync=off``, what the OS had is kept; prepared transactions are recovered from the WAL)."""

    process: ManagedProcess
    server: PostgresServer | None = None

    def start(self) -> PostgresServer:
        self.server = start_postgres(self.process, port=self.server.port if self.server else pick_port(None))
        return self.server

    def crash(self) -> bool:
        """SIGKILL every process of it at once; False when it was not running."""
        return self.process.kill()

    def stop(self) -> None:
        self.process.stop(grace=5)


if __name__ == "__main__":  # python -m onceflow_devkit.services.postgres: is the server installed?
    print(postgres_bin())
