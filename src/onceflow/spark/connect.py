"""The spark task as a Spark Connect client (a ``spark_connect`` connection).

The batch job (``onceflow.spark.batch_job``) runs in the Airflow task's own
process; its DataFrames run on a long-running Spark Connect server, so no JVM
starts per batch. Call sequence::

    session = join_session(url, code)       the code's session on the server, artifacts added
    run_batch(session, runtime, seq)        as under spark-submit: attempt, read, pre-commit, votes,
                                            but every output at once (a client thread each)
    on failure or kill: interrupt_job()     the server stops this attempt's queries
    on SIGTERM (on_kill): interrupt()       the same from a client of its own, then the job
                                            raises JobStopped rather than start another query

Sessions. The server starts Python worker daemons per session (the session's
artifacts are on their path) and does not stop them when the session ends
(Spark 4), so a session per batch would leave about ten processes behind
per batch. Every batch that ships the same code therefore joins one session,
named by that code: the zips' names carry their content's hash, so new code
gets a new session. A session the server has closed (its idle timeout)
cannot be joined again; the next generation of the name is used, and
remembered on this machine (a file beside the code zips), so the next batch
starts there instead of trying every closed generation again.

Everything a Python worker needs beyond the job's options comes from the
server's environment: secrets (``AWS_*``, the Kafka client's secret
settings, catalog secrets) must be set where the server runs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from onceflow.config.settings import ConfigurationError
from onceflow.storage.local import LocalStorage

log = logging.getLogger(__name__)

# The name space of onceflow's session ids (uuid5 of the shipped code and a generation).
SESSION_NAMESPACE = uuid.UUID("5b0e0f7a-6c1e-4d6b-9a51-0e6c0f10ce11")
# Closed sessions the server remembers (spark.connect.session.manager.closedSessionsTombstonesSize).
MAX_GENERATIONS = 1000
SESSION_CLOSED = "INVALID_HANDLE.SESSION_CLOSED"
LOOPBACK = ("127.0.0.1", "::1")
# While set, PySpark's functions (F.col, ...) build Spark Connect expressions; its classic
# builder sets it for good, which would turn every later local session of the process off.
CONNECT_MODE_VAR = "SPARK_CONNECT_MODE_ENABLED"


@contextmanager
def connect_mode() -> Iterator[None]:
    """This process builds Spark Connect expressions inside the block, and classic ones after it."""
    before = os.environ.get(CONNECT_MODE_VAR)
    os.environ[CONNECT_MODE_VAR] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CONNECT_MODE_VAR, None)
        else:
            os.environ[CONNECT_MODE_VAR] = before


def code_session_id(code_zips: Sequence[str], generation: int) -> str:
    """The session of every job that ships exactly ``code_zips`` (names carry their content hash)."""
    return str(uuid.uuid5(SESSION_NAMESPACE, f"onceflow|{_names(code_zips)}|{generation}"))


def _names(code_zips: Sequence[str]) -> str:
    return ",".join(Path(z).name for z in code_zips)


def session_url(connection_url: str, session_id: str) -> str:
    """``sc://host:port/;params`` (what SparkConnectHook.get_connection_url gives) with ``session_id``."""
    if "session_id=" in connection_url:
        raise ConfigurationError("the Spark Connect connection names a session_id: remove it, onceflow names the "
                                 "session of each pipeline's code itself")
    base = connection_url.rstrip(";")
    return f"{base};session_id={session_id}" if "/;" in base else f"{base.rstrip('/')}/;session_id={session_id}"


def _host_and_params(connection_url: str) -> tuple[str, dict[str, str]]:
    """(host:port, parameters) of ``sc://host:port/;name=value;...``."""
    netloc, _, rest = connection_url.removeprefix("sc://").partition("/")
    return netloc, dict(p.split("=", 1) for p in rest.split(";") if "=" in p)


def check_connection_url(connection_url: str) -> None:
    """Refuse, naming the fix, a token the client would send over TLS to a server on this machine: the
    Spark Connect client speaks TLS to every host but ``localhost`` once a token is set, and a server
    without TLS answers each handshake with an error the client retries for minutes."""
    address, params = _host_and_params(connection_url)
    host = address.rsplit(":", 1)[0].strip("[]")
    if "token" in params and params.get("use_ssl", "").lower() != "true" and host in LOOPBACK:
        raise ConfigurationError(
            f"the Spark Connect connection to {address} has a token, so the client speaks TLS to it (for every host "
            "but 'localhost'): set the connection's host to localhost, or give the server TLS and set use_ssl")


def refused(exc: BaseException, connection_url: str) -> Exception | None:
    """A ConfigurationError for a server that refused this client's token (gRPC UNAUTHENTICATED), else None."""
    if "UNAUTHENTICATED" not in str(exc):
        return None
    address, params = _host_and_params(connection_url)
    said = "Invalid authentication token" if "Invalid authentication token" in str(exc) else (
        "No authentication token provided" if "No authentication token" in str(exc) else "UNAUTHENTICATED")
    return ConfigurationError(
        f"the Spark Connect server at {address} refused this client ({said}; the client "
        f"{'sent a token' if 'token' in params else 'sent no token'}): set the spark connection's password to the "
        "token the server requires (spark.connect.authenticate.token)")


def is_session_closed(exc: BaseException) -> bool:
    condition = getattr(exc, "getCondition", lambda: None)()
    return condition == SESSION_CLOSED or SESSION_CLOSED in str(exc)


def _generation_hint(connection_url: str, code_zips: Sequence[str]) -> Path:
    """Where this machine remembers the generation that last worked for this code on this server."""
    key = hashlib.sha256(f"{connection_url}|{_names(code_zips)}".encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"onceflow-connect-{os.getuid()}-{key}.generation"


def _read_hint(path: Path) -> int:
    try:
        return min(max(int(path.read_text()), 0), MAX_GENERATIONS - 1)
    except (OSError, ValueError):
        return 0  # none yet, or unreadable: only a hint


def _write_hint(path: Path, generation: int) -> None:
    try:
        LocalStorage().replace(str(path), str(generation).encode())  # atomic: a reader sees one value or the other
    except OSError:
        log.debug("could not remember Spark Connect session generation %d in %s", generation, path, exc_info=True)


def join_session(connection_url: str, code_zips: Sequence[str]):
    """The server's session for this code, with the code added as Python artifacts.

    Adding an artifact the session has is a no-op, so every batch adds them: a
    server restarted since the last batch gets them again. Closed generations
    are skipped from the one this machine last joined on."""
    from pyspark.sql.connect.session import SparkSession

    check_connection_url(connection_url)
    hint = _generation_hint(connection_url, code_zips)
    start = _read_hint(hint)
    for generation in range(start, MAX_GENERATIONS):
        session_id = code_session_id(code_zips, generation)
        spark = None
        try:
            spark = SparkSession.builder.remote(session_url(connection_url, session_id)).create()
            for code in code_zips:
                spark.addArtifacts(code, pyfile=True)
        except Exception as exc:
            if spark is not None:
                close_client(spark)
            refusal = refused(exc, connection_url)
            if refusal is not None:
                raise refusal from None
            if not is_session_closed(exc):
                raise
            continue
        log.info("Spark Connect session %s (code %s, generation %d)", session_id,
                 ", ".join(Path(z).name for z in code_zips), generation)
        if generation != start:
            _write_hint(hint, generation)
        return spark
    raise RuntimeError(f"the Spark Connect server has closed the {MAX_GENERATIONS} sessions onceflow names for this "
                       "code: restart the server, or raise spark.connect.session.manager.defaultSessionTimeout so "
                       "that sessions outlive the time between batches")


# How long closing a client may take before it is left behind (see close_client): PySpark's own
# close first waits up to 10 s for its pending release calls.
CLOSE_TIMEOUT_S = 30.0


def close_client(spark, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
    """Close the connection, never the session (the next batch joins it). Now rather than at
    interpreter exit, where gRPC's channel close can wait forever (seen after a failed job).
    ``stop()`` without releasing also forgets it as the process's active and default session:
    otherwise the next session this process joins is neither, and a transform's
    ``F.udf(f, "string")`` (its DDL is parsed with the active session) fails.

    gRPC's close waits for every stream of the channel to end, and a stream cut short by a
    timeout raised in the task (Airflow's execution_timeout) may never end: a chaos run's task
    hung there for good, "running", its attempt already failed. So the channel is closed in a
    thread of its own, and one that outlasts ``timeout_s`` is left behind with a warning; the
    active session is thread-local, so ``stop()`` itself runs here, on the closed client."""
    spark.release_session_on_close = False
    closer = threading.Thread(target=spark.client.close, name="onceflow-spark-connect-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    if closer.is_alive():
        log.warning("the Spark Connect client did not close within %.0f s (gRPC waits for a stream that was cut "
                    "short); it is left to the process's exit", timeout_s)
        forget_session(spark)  # stop() would wait on the same channel
        return
    spark.stop()


def forget_session(spark) -> None:
    """What ``stop()`` does besides closing: ``spark`` is no longer this thread's active session nor
    the process's default one, so the next session joined here becomes both."""
    from pyspark.sql.connect.session import SparkSession

    if SparkSession._default_session is spark:
        SparkSession._default_session = None
    if getattr(SparkSession._active_session, "session", None) is spark:
        SparkSession._active_session.session = None


def job_tag(pipeline: str, seq: int) -> str:
    """The tag of one batch job's queries: unique, as pipelines of the same code share a
    session (and interrupting a tag reaches the whole session). Spark tags allow no commas."""
    return f"onceflow-{pipeline}-{seq}-{uuid.uuid4().hex[:8]}".replace(",", "_")


def interrupt_job(spark, tag: str) -> None:
    """Stop the server's queries of a job whose client gives up (a timeout, a kill): they would
    otherwise run on detached, as a zombie attempt that fencing refuses at the end."""
    try:
        interrupted = spark.interruptTag(tag)
        if interrupted:
            log.warning("interrupted %d Spark Connect operation(s) tagged %s", len(interrupted), tag)
    except Exception as exc:  # the server may be gone: nothing runs there then
        log.warning("could not interrupt the operations tagged %s: %s", tag, exc)


class JobStopped(Exception):
    """The task was stopped while its job ran: the job's queries on the server are interrupted."""


class ConnectBatchJob:
    """One attempt of a batch as a Spark Connect client. ``interrupt()`` is called by the task's
    ``on_kill``, in the SIGTERM handler of the thread that runs ``run()``."""

    def __init__(self, connection_url: str, runtime, seq: int, code_zips: Sequence[str]):
        self.connection_url = connection_url
        self.runtime = runtime
        self.seq = seq
        self.code_zips = list(code_zips)
        self.tag = job_tag(runtime.spec.name, seq)
        self.session_id: str | None = None
        self.running = False
        self.stopped = False

    def run(self):
        """Pre-commit every output of the batch through the server; the JobResult."""
        from onceflow.spark.batch_job import run_batch

        spark = join_session(self.connection_url, self.code_zips)
        self.session_id = spark.session_id
        spark.addTag(self.tag)
        self.running = True
        try:
            if self.stopped:  # stopped while joining: no query is started
                raise JobStopped(f"the task was stopped before the job's first query ({self.tag})")
            with connect_mode():
                return run_batch(spark, self.runtime, self.seq, outputs_at_once=True)
        except BaseException:
            interrupt_job(spark, self.tag)
            raise
        finally:
            self.running = False
            try:  # never hide the job's own error behind a server that is gone
                spark.removeTag(self.tag)
                close_client(spark)
            except Exception as exc:
                log.warning("closing the Spark Connect client: %s", exc)

    def interrupt(self) -> None:
        """Stop this job's queries from a client of its own, then (while ``run()`` runs) raise
        JobStopped there. Airflow 3's SIGTERM handler only calls on_kill: the job would otherwise
        go on starting queries until the SIGKILL that follows, and leave them running detached."""
        self.stopped = True
        if self.session_id is not None:
            self._interrupt_from_own_client()
        if self.running:
            raise JobStopped(f"the task was stopped: the queries tagged {self.tag} are interrupted")

    def _interrupt_from_own_client(self) -> None:
        from pyspark.sql.connect.session import SparkSession

        try:
            spark = SparkSession.builder.remote(session_url(self.connection_url, self.session_id)).create()
        except Exception as exc:
            log.warning("could not reach the Spark Connect server to interrupt %s: %s", self.tag, exc)
            return
        interrupt_job(spark, self.tag)
        try:
            close_client(spark)
        except Exception as exc:
            log.warning("closing the Spark Connect client: %s", exc)


def run_connect_batch(connection_url: str, runtime, seq: int, code_zips: Sequence[str]):
    """Pre-commit every output of batch ``seq`` through the server; the JobResult."""
    return ConnectBatchJob(connection_url, runtime, seq, code_zips).run()
