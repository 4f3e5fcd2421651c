"""LocalAirflow: one Airflow home, its CLI, and its server processes (api-server, scheduler,
dag-processor; a triggerer and Celery workers when asked).

Runs in the calling process (a test, ``onceflow demo``); everything Airflow
does happens in subprocesses that get ``env()``.

Layout of ``home``::

    airflow.cfg               written by the first Airflow command
    secrets.json              the home's JWT, session and Fernet keys (mode 0600), see _secrets
    airflow.db                the metadata database when no ``database`` is given (SQLite)
    logs/                     task logs
    api-server/ scheduler/ dag-processor/ (triggerer/ celery-worker-<n>/)
                              one ManagedProcess directory each: pid, port, service.log
    sessions                  session ids of started components (see _sessions)
    dags-test/                full output of every ``dags_test`` call

Why the environment looks the way it does:

- ``[core] execution_api_server_url`` must point at our API port, or every
  task fails to reach the Execution API (the default assumes 8080).
- ``[core] parallelism=4``: the default forks 32 idle LocalExecutor workers.
- ``[dag_processor] refresh_interval=2``: a new DAG file is seen in seconds,
  not the default 5 minutes.
- Free ports for the API and any log server, never 8080/8793: other
  Airflows (other test sessions) may run on the same machine.
- The caller's own ``AIRFLOW_*`` variables are dropped: this home is hermetic.
- The simple auth manager with everyone admin: a local, loopback-only API.
- ``PYSPARK_PYTHON``: Spark's Python workers must be this venv's Python.
- The home's keys are set, not left to airflow.cfg: each component started
  before airflow.cfg exists writes one with keys of its own, and the
  Execution API then refuses the scheduler's task tokens ("Invalid auth
  token"). ``airflow db migrate`` used to write it first; a home whose
  database is a migrated copy runs no migration.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Mapping

from onceflow_devkit.services.process import MARKER_VAR, _die_with_parent, pick_port, write_private
from onceflow_devkit.local_airflow.errors import AirflowHarnessError
from onceflow_devkit.local_airflow.metadata import MetadataDb, RunStates
from onceflow_devkit.local_airflow.processes import AirflowProcess, stray_processes
from onceflow_devkit.local_airflow.rest import AirflowApi

# Start order: the scheduler and dag-processor need nothing from the API, so
# they import Airflow while the API server starts; the API is awaited last.
COMPONENTS = ("dag-processor", "scheduler", "api-server")
# Started only when asked (``triggerer=True``): what runs deferred tasks and AssetWatchers' triggers.
TRIGGERER = "triggerer"
# The api-server reads task logs from the shared log folder; the scheduler's
# log server ("serve-logs") would be one more process listening on every
# interface, for nothing.
_COMPONENT_ARGS = {"scheduler": ("--skip-serve-logs",)}
# Celery workers (``celery_broker`` given) are components named celery-worker-<n>.
CELERY_WORKER = "celery-worker"
CELERY_EXECUTOR = "airflow.providers.celery.executors.celery_executor.CeleryExecutor"
_CONN_ID = re.compile(r"^[A-Za-z0-9_]+$")
_TAIL_LINES = 40


@dataclass(frozen=True)
class DagsTestResult:
    """The outcome of one ``airflow dags test``.

    ``returncode`` is 1 whenever the run failed, even when a rollback task
    (trigger_rule one_failed) succeeded: read ``tasks`` for what ran.
    """

    dag_id: str
    returncode: int
    run_id: str | None
    run_state: str | None
    logical_date: datetime | None
    tasks: dict[str, str | None]
    output_tail: str
    log_file: Path
    seconds: float

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0 and self.run_state == "success"

    def describe(self) -> str:
        """A paragraph for assertion and error messages."""
        return (
            f"airflow dags test {self.dag_id} exited {self.returncode} after {self.seconds:.1f} s; "
            f"run {self.run_id} is {self.run_state}; tasks {self.tasks}; full output in {self.log_file}; "
            f"last lines:\n{self.output_tail}"
        )


def _airflow_cli(python: Path) -> Path:
    cli = Path(python).parent / "airflow"
    if not cli.exists():
        raise AirflowHarnessError(
            f"no airflow CLI next to {python}: run onceflow from the project venv "
            "(make venv installs requirements.txt, apache-airflow included)"
        )
    return cli


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class LocalAirflow:
    home: Path
    dags_folder: Path
    plugins_folder: Path | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # The interpreter of the Airflow install to run (its venv's airflow CLI): this one by default.
    python: Path = Path(sys.executable)
    # Also run the triggerer (AssetWatchers, deferred tasks).
    triggerer: bool = False
    # SQLAlchemy URL of the metadata database (``metadata_database.airflow_database``); None: SQLite in home.
    database: str | None = field(default=None, repr=False)
    # The database is a copy of a migrated one: migrate() has nothing to do.
    migrated: bool = False
    # A Celery broker URL (``services.redis``): the CeleryExecutor with ``celery_workers`` workers
    # instead of the LocalExecutor.
    celery_broker: str | None = field(default=None, repr=False)
    celery_workers: int = 2

    @property
    def components(self) -> tuple[str, ...]:
        workers = tuple(f"{CELERY_WORKER}-{n}" for n in range(1, self.celery_workers + 1)) if self.celery_broker else ()
        return (*COMPONENTS, *((TRIGGERER,) if self.triggerer else ()), *workers)

    def _argv(self, component: str) -> list[str]:
        airflow = str(_airflow_cli(self.python))
        if component.startswith(CELERY_WORKER):
            # Each worker its own Celery name and PID file (the default PID file is one per home).
            return [airflow, "celery", "worker", "--celery-hostname", f"{component}@%h", "--skip-serve-logs",
                    "--pid", str(self.process(component).directory / "celery.pid")]
        return [airflow, component, *_COMPONENT_ARGS.get(component, ())]

    def __post_init__(self) -> None:
        self.home = Path(self.home).resolve()
        self.dags_folder = Path(self.dags_folder).resolve()
        if self.plugins_folder is not None:
            self.plugins_folder = Path(self.plugins_folder).resolve()
        if not self.dags_folder.is_dir():
            raise AirflowHarnessError(
                f"dags folder {self.dags_folder} does not exist: create it or pass the folder holding your DAG files"
            )
        self._connections: dict[str, str] = {}
        self._migrated = self.migrated
        self.home.mkdir(parents=True, exist_ok=True)
        # Running components keep their ports; otherwise take free ones now so
        # env() is the same for every subprocess of this instance. Free ports,
        # never the defaults (8080, 8793): another Airflow may run beside us.
        api, scheduler = self.process("api-server"), self.process("scheduler")
        self.api_port = (api.running_pid() and api.port()) or pick_port(None)
        self.log_server_port = (scheduler.running_pid() and scheduler.port()) or pick_port(None)

    # -- configuration -------------------------------------------------------
    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def sql_alchemy_conn(self) -> str:
        return self.env()["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]

    def set_connection(self, conn_id: str, conn: Mapping) -> None:
        """Define Airflow connection ``conn_id`` as ``AIRFLOW_CONN_<ID>`` (JSON form).

        JSON, not a URI: a URI cannot say ``host=local[2]``. Affects processes
        started afterwards, so call it before start().
        """
        if not _CONN_ID.match(conn_id):
            raise AirflowHarnessError(
                f"connection id {conn_id!r} cannot become an environment variable: use letters, digits and _"
            )
        if "conn_type" not in conn:
            raise AirflowHarnessError(f"connection {conn_id!r} needs a conn_type, e.g. {{'conn_type': 'spark', ...}}")
        if self.is_running():
            raise AirflowHarnessError(
                f"connection {conn_id!r} set while Airflow runs under {self.home}: the running scheduler "
                "would not see it. Call set_connection() before start(), or stop() first"
            )
        self._connections[conn_id] = json.dumps(dict(conn))

    def _secrets(self) -> dict[str, str]:
        """The home's keys, made once: the same in every process of this home."""
        from cryptography.fernet import Fernet

        path = self.home / "secrets.json"
        if not path.exists():
            keys = {"AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
                    "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
                    "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode()}
            write_private(path, json.dumps(keys))
        return json.loads(path.read_text())

    def env(self) -> dict[str, str]:
        """The environment of every Airflow subprocess of this home.

        The caller's environment minus its own Airflow settings (``AIRFLOW_*``:
        a shell's AIRFLOW_HOME or AIRFLOW__CORE__DAGS_FOLDER must not leak into
        this home; pass such settings in ``extra_env``), plus ours.
        """
        venv_bin = str(Path(self.python).parent)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_") and k != MARKER_VAR}
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database or f"sqlite:///{self.home}/airflow.db",
                "AIRFLOW__CORE__EXECUTOR": CELERY_EXECUTOR if self.celery_broker else "LocalExecutor",
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.api_port),
                "AIRFLOW__API__BASE_URL": self.api_url,
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
                "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
                "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "600",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
                # Log servers (not started, see _COMPONENT_ARGS) would listen here, not on 8793.
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.log_server_port),
                "PYSPARK_PYTHON": str(self.python),
                "PYSPARK_DRIVER_PYTHON": str(self.python),
                # boto3's credential chain must never ask a cloud metadata address from here.
                "AWS_EC2_METADATA_DISABLED": "true",
                "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
                # Loopback traffic (tasks -> Execution API) must never go through a proxy.
                "NO_PROXY": ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"])),
                "no_proxy": ",".join(filter(None, [os.environ.get("no_proxy"), "127.0.0.1", "localhost"])),
            }
        )
        env.update(self._secrets())
        if self.celery_broker is not None:
            env.update({"AIRFLOW__CELERY__BROKER_URL": self.celery_broker,
                        # Task states come from the metadata database; Celery's results go to Redis too.
                        "AIRFLOW__CELERY__RESULT_BACKEND": self.celery_broker.rsplit("/", 1)[0] + "/1",
                        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "4"})
        if self.database is not None:  # Airflow would derive an asyncpg URL, a driver we do not install
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] = self.database
        if self.plugins_folder is not None:
            env["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(self.plugins_folder)
        env.update({f"AIRFLOW_CONN_{conn_id.upper()}": value for conn_id, value in self._connections.items()})
        env.update(self.extra_env)
        return env

    # -- CLI -----------------------------------------------------------------
    def cli(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """Run ``airflow <args>`` with env(); raise naming the command when it fails."""
        command = [str(_airflow_cli(self.python)), *args]
        try:
            done = subprocess.run(command, env=self.env(), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise AirflowHarnessError(f"`airflow {' '.join(args)}` did not finish within {timeout:.0f} s") from exc
        if done.returncode != 0:
            raise AirflowHarnessError(
                f"`airflow {' '.join(args)}` failed with exit code {done.returncode} (AIRFLOW_HOME={self.home}):\n"
                f"{_tail(done.stdout + done.stderr)}"
            )
        return done

    def create_backfill(self, dag_id: str, from_date: str, to_date: str, max_active_runs: int | None = None,
                        reprocess_behavior: str | None = None, dag_run_conf: dict | None = None) -> dict:
        """``airflow backfill create`` as a user types it; the backfill it made, as the REST API shows it
        (``AirflowApi.create_backfill`` is what the UI's dialog sends instead)."""
        options = {"--max-active-runs": max_active_runs, "--reprocess-behavior": reprocess_behavior,
                   "--dag-run-conf": json.dumps(dag_run_conf) if dag_run_conf is not None else None}
        with self.api() as api:
            before = {b["id"] for b in api.backfills(dag_id)}
            self.cli("backfill", "create", "--dag-id", dag_id, "--from-date", from_date, "--to-date", to_date,
                     *(str(part) for flag, value in options.items() if value is not None for part in (flag, value)))
            made = [b for b in api.backfills(dag_id) if b["id"] not in before]
        if len(made) != 1:
            raise AirflowHarnessError(f"`airflow backfill create --dag-id {dag_id}` made {len(made)} backfills: {made}")
        return made[0]

    def migrate(self, timeout: float = 300.0) -> None:
        """``airflow db migrate``: creates or upgrades the metadata DB. Idempotent.

        Runs once per instance (a no-op migration still costs a CLI start).
        """
        if not self._migrated:
            self.cli("db", "migrate", timeout=timeout)
            self._migrated = True

    def run_states(self, dag_id: str, run_id: str) -> RunStates | None:
        """The run's state and each task's state, from the metadata DB (None: no such run)."""
        return MetadataDb(self.sql_alchemy_conn).run_states(dag_id, run_id)

    def dags_test(
        self,
        dag_id: str,
        conf: dict | None = None,
        logical_date: str | None = None,
        timeout: float = 300.0,
    ) -> DagsTestResult:
        """Run one DAG run in-process with ``airflow dags test`` and read back its states.

        Does not raise when the run fails (a failed run is a result); raises
        AirflowHarnessError when it does not finish within ``timeout`` or
        creates no run at all (unknown DAG id, a DAG file that does not import).
        """
        db = MetadataDb(self.sql_alchemy_conn)
        before = db.last_run_pk(dag_id)
        command = [str(_airflow_cli(self.python)), "dags", "test", dag_id]
        if logical_date is not None:
            command.append(logical_date)
        if conf is not None:
            command += ["--conf", json.dumps(conf)]
        log_dir = self.home / "dags-test"
        log_dir.mkdir(exist_ok=True)
        log_file = log_dir / f"{dag_id}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{time.monotonic_ns()}.log"
        started = time.monotonic()
        with open(log_file, "w+") as log:
            proc = subprocess.Popen(
                command,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # so a timeout kills the tasks it forked too
                preexec_fn=_die_with_parent,  # and a killed caller does not leave it running
            )
            try:
                returncode = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                log.seek(0)
                raise AirflowHarnessError(
                    f"airflow dags test {dag_id} did not finish within {timeout:.0f} s and was killed; "
                    f"full output in {log_file}; last lines:\n{_tail(log.read())}"
                ) from None
            log.seek(0)
            output = log.read()
        seconds = time.monotonic() - started
        run_id = db.newest_run_after(dag_id, before)
        if run_id is None and returncode != 0:
            raise AirflowHarnessError(
                f"airflow dags test {dag_id} exited {returncode} without creating a run: is {dag_id!r} "
                f"defined by a file under {self.dags_folder}, and does that file import cleanly? "
                f"Full output in {log_file}; last lines:\n{_tail(output)}"
            )
        states = db.run_states(dag_id, run_id) if run_id else None
        return DagsTestResult(
            dag_id=dag_id,
            returncode=returncode,
            run_id=run_id,
            run_state=states.state if states else None,
            logical_date=states.logical_date if states else None,
            tasks=states.tasks if states else {},
            output_tail=_tail(output),
            log_file=log_file,
            seconds=seconds,
        )

    # -- servers -------------------------------------------------------------
    def process(self, component: str) -> AirflowProcess:
        return AirflowProcess(f"airflow-{component}", self.home / component)

    def is_running(self) -> bool:
        return any(self.process(c).running_pid() for c in self.components)

    def api(self) -> AirflowApi:
        """A REST client for this Airflow's API server (close it, or use it as a context manager)."""
        return AirflowApi(self.api_url, sqlite=self.database is None)

    def start(self, timeout: float = 120.0, detach: bool = False) -> None:
        """Start api-server, scheduler and dag-processor; return when all three are healthy.

        Healthy means: the API answers ``/api/v2/monitor/health`` and reports
        a live scheduler and dag-processor heartbeat. Migrates first.
        Idempotent: components already running are kept. The processes die
        with the calling *thread* (PR_SET_PDEATHSIG): call it from a thread
        that outlives the servers, e.g. the main thread; ``detach`` leaves
        them running after this process ends (``stop`` ends them).
        """
        self.migrate()
        env = self.env()
        deadline = time.monotonic() + timeout
        with self.api() as api:
            for component in self.components:
                proc = self.process(component)
                if proc.running_pid():
                    continue
                remaining = max(deadline - time.monotonic(), 1.0)
                try:
                    proc.start(
                        self._argv(component),
                        port={"api-server": self.api_port, "scheduler": self.log_server_port}.get(component, 0),
                        ready=self._recording_session(proc, api.health if component == "api-server" else None),
                        env=env,
                        timeout=remaining,
                        die_with_parent=not detach,
                    )
                except Exception as exc:
                    self.stop(grace=2)
                    raise AirflowHarnessError(
                        f"Airflow {component} did not start under {self.home}: {exc}"
                    ) from exc
            self._wait_healthy(api, deadline)

    def _recording_session(self, proc: AirflowProcess, check: Callable[[], object] | None) -> Callable[[], bool]:
        """A readiness probe that first records the new process's session.

        ManagedProcess calls it once the PID file exists, so even a component
        that dies during start-up has its session recorded for stop().
        """
        recorded = False

        def ready() -> bool:
            nonlocal recorded
            if not recorded:
                self._record_session(int(proc.pid_file.read_text()))
                recorded = True
            return check is None or bool(check())

        return ready

    def _wait_healthy(self, api: AirflowApi, deadline: float) -> None:
        health: dict = {}
        while time.monotonic() < deadline:
            for component in self.components:
                proc = self.process(component)
                if proc.running_pid() is None:
                    self.stop(grace=2)
                    raise AirflowHarnessError(
                        f"Airflow {component} exited during start-up; log {proc.log_file}:\n{proc.log_tail()}"
                    )
            try:
                health = api.health()
            except Exception as exc:  # the API restarting a worker: try again
                health = {"error": str(exc)}
            if all(
                (health.get(part) or {}).get("status") == "healthy"
                for part in ("metadatabase", "scheduler", "dag_processor", *(("triggerer",) if self.triggerer else ()))
            ):
                return
            time.sleep(0.5)
        self.stop(grace=2)
        raise AirflowHarnessError(
            f"Airflow under {self.home} was not healthy in time; last health report {health}. "
            f"Logs: {', '.join(str(self.process(c).log_file) for c in self.components)}"
        )

    def stop(self, grace: float = 10.0) -> None:
        """Stop every component: SIGTERM its process group, SIGKILL after ``grace`` s.

        Then kills, by PID, anything the components forked outside their
        groups. Idempotent.
        """
        # All at once, not one grace period after another: the dag-processor
        # can ignore SIGTERM, and the others need not wait for it.
        sessions = self._sessions()
        pids = [pid for pid in (self.process(c).running_pid() for c in self.components) if pid]
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(self.process(c).running_pid() for c in self.components):
            time.sleep(0.1)
        for component in self.components:
            self.process(component).stop(grace=0)  # SIGKILL what is left, drop the PID file
        for pid in stray_processes(self.home, sessions):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5.0
        while stray_processes(self.home, sessions) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in sessions:  # leaders we forked are our children: reap their zombies
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        self._sessions_file.unlink(missing_ok=True)

    def processes(self) -> list[int]:
        """PIDs of every live process of this Airflow: components and all they forked."""
        return stray_processes(self.home, self._sessions())

    # Every component leads its own session, and its descendants (executor
    # workers, the log server, task processes, a task's spark-submit JVM) keep
    # that session id after the leader dies: when the caller is SIGKILLed, the
    # leaders die with it (PR_SET_PDEATHSIG) but the scheduler's children do
    # not. The ids live in a file, so stop() of any later instance on this
    # home (or a test session's clean-up) still finds them.
    @property
    def _sessions_file(self) -> Path:
        return self.home / "sessions"

    def _record_session(self, pid: int) -> None:
        with open(self._sessions_file, "a") as f:
            f.write(f"{pid}\n")

    def _sessions(self) -> set[int]:
        try:
            recorded = {int(line) for line in self._sessions_file.read_text().split() if line.isdigit()}
        except FileNotFoundError:
            recorded = set()
        return recorded | {pid for pid in (self.process(c).running_pid() for c in self.components) if pid}

    def __enter__(self) -> "LocalAirflow":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
