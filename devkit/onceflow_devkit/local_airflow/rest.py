"""A small client for Airflow 3's public REST API (``/api/v2``).

Runs in the calling process (test, CLI). Only what driving a pipeline
needs: find a DAG, unpause it, trigger a run with conf, wait for it, read
its task instances, logs and XComs, clear it. Every call that waits takes a
timeout and, when it expires, says what it was waiting for and what the
server last answered. A busy api-server may not answer one poll in time:
waiting calls ride that out until their own deadline, and ``trigger`` names
its run itself so that re-sending it cannot create a second run.

Auth: with ``[core] simple_auth_manager_all_admins`` (what LocalAirflow
sets) no token is needed. Against an Airflow that wants one, pass
``username``/``password``: the client gets a JWT from ``POST /auth/token``
and sends it as a Bearer token.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, TypeVar
from urllib.parse import quote

import httpx

from onceflow_devkit.local_airflow.errors import AirflowHarnessError

FINISHED_RUN_STATES = frozenset({"success", "failed"})
TRIGGER_TIMEOUT_S = 120.0
# The scheduler marks a backfill left empty by a refused creation complete after 2 minutes.
BACKFILL_CREATE_TIMEOUT_S = 300.0
# After a creation refused as locked: long enough for the tasks of runs Airflow deleted to be told
# "not found", exit, and have their executor events handled before runs of the same ids come back.
LOCKED_CREATE_SETTLE_S = 20.0
T = TypeVar("T")


def _p(value: str) -> str:
    # run ids contain ':' and '+' (manual__2026-01-01T00:00:00+00:00)
    return quote(value, safe="")


class AirflowApi:
    def __init__(
        self,
        base_url: str,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sqlite: bool = False,
    ):
        """``sqlite``: the Airflow's metadata database is SQLite (see ``create_backfill``)."""
        self.base_url = base_url.rstrip("/")
        self.sqlite = sqlite
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, trust_env=False, transport=transport)
        if username is not None:
            token = self._http.post("/auth/token", json={"username": username, "password": password or ""})
            self._check(token, "POST /auth/token")
            self._http.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "AirflowApi":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------
    def _check(self, response: httpx.Response, what: str) -> httpx.Response:
        if response.is_error:
            raise AirflowHarnessError(
                f"{what} on {self.base_url} answered HTTP {response.status_code}: {response.text[:500]}"
            )
        return response

    def _get(self, path: str, **params) -> Any:
        return self._check(self._http.get(path, params=params or None), f"GET {path}").json()

    def _until(self, deadline: float, ask: Callable[[], T], what: str) -> T:
        """``ask()``, asked again while the server does not answer (timeout, refused, reset) until ``deadline``."""
        while True:
            try:
                return ask()
            except httpx.TransportError as exc:
                if time.monotonic() > deadline:
                    raise AirflowHarnessError(f"{what}: {self.base_url} did not answer ({type(exc).__name__}: {exc})") from exc
                time.sleep(1.0)

    # -- health --------------------------------------------------------------
    def health(self) -> dict:
        """``GET /api/v2/monitor/health``: metadatabase, scheduler, dag_processor, triggerer."""
        return self._get("/api/v2/monitor/health")

    # -- DAGs ----------------------------------------------------------------
    def dag(self, dag_id: str) -> dict | None:
        response = self._http.get(f"/api/v2/dags/{_p(dag_id)}")
        if response.status_code == 404:
            return None
        return self._check(response, f"GET dag {dag_id}").json()

    def import_errors(self) -> list[dict]:
        return self._get("/api/v2/importErrors")["import_errors"]

    def wait_for_dag(self, dag_id: str, timeout: float = 60.0) -> dict:
        """Wait until the dag-processor has parsed ``dag_id``; return the DAG's record.

        On timeout the message lists the import errors Airflow recorded.
        """
        deadline = time.monotonic() + timeout
        while True:
            found = self._until(deadline, lambda: self.dag(dag_id), f"waiting for DAG {dag_id}")
            if found is not None:
                return found
            if time.monotonic() > deadline:
                errors = [f"{e.get('filename')}: {e.get('stack_trace', '').strip()[-400:]}" for e in self.import_errors()]
                raise AirflowHarnessError(
                    f"DAG {dag_id!r} did not appear within {timeout:.0f} s. Check that its file is in the "
                    f"dags folder and defines dag_id={dag_id!r}. Import errors: {errors or 'none'}"
                )
            time.sleep(0.5)

    def unpause(self, dag_id: str) -> None:
        """Idempotent: unpausing an unpaused DAG is a no-op."""
        self._check(
            self._http.patch(f"/api/v2/dags/{_p(dag_id)}", json={"is_paused": False}), f"unpause {dag_id}"
        )

    def pause(self, dag_id: str) -> None:
        self._check(self._http.patch(f"/api/v2/dags/{_p(dag_id)}", json={"is_paused": True}), f"pause {dag_id}")

    # -- runs ----------------------------------------------------------------
    def trigger(
        self,
        dag_id: str,
        conf: dict | None = None,
        run_id: str | None = None,
        logical_date: str | None = None,
    ) -> str:
        """Create a DAG run; return its run id. A paused DAG's run waits queued until unpause().

        The run id is chosen here (``manual__<now>_<random>`` unless given), so
        a POST whose answer was lost is sent again safely: the second one
        finds the run already there (409) instead of creating another.
        """
        run_id = run_id or f"manual__{datetime.now(timezone.utc).isoformat()}_{uuid.uuid4().hex[:6]}"
        body: dict[str, Any] = {"dag_run_id": run_id, "logical_date": logical_date, "conf": conf or {}}
        posts = 0

        def post() -> httpx.Response:
            nonlocal posts
            posts += 1
            return self._http.post(f"/api/v2/dags/{_p(dag_id)}/dagRuns", json=body)

        response = self._until(time.monotonic() + TRIGGER_TIMEOUT_S, post, f"trigger {dag_id}")
        if response.status_code == 409 and posts > 1:
            return run_id  # an earlier POST whose answer was lost created it
        return self._check(response, f"trigger {dag_id}").json()["dag_run_id"]

    def create_backfill(self, dag_id: str, from_date: str, to_date: str, **options: Any) -> dict:
        """``POST /api/v2/backfills`` (what ``airflow backfill create`` and the UI's dialog do);
        ``options``: max_active_runs, reprocess_behavior, run_backwards, dag_run_conf."""
        body = {"dag_id": dag_id, "from_date": from_date, "to_date": to_date, **options}
        if not self.sqlite:
            return self._check(self._http.post("/api/v2/backfills", json=body), f"backfill of {dag_id}").json()
        deadline = time.monotonic() + BACKFILL_CREATE_TIMEOUT_S
        locked = False
        # SQLite (a harness without PostgreSQL) is locked while the scheduler writes: the request fails with 503,
        # or with 500 "Database error" when the lock hits the audit log first (nothing else done: ask again).
        # A 503 may have done damage: on SQLite each run's SAVEPOINT is the transaction, so its release
        # commits that run's clearing at once; Airflow's cleanup then deletes the runs it already gave the
        # backfill, tasks and all, while the scheduler runs them (their tasks meet "Task Instance not
        # found"), and may fail to remove the backfill itself, so the next try meets 409 "already running"
        # until the scheduler marks that backfill complete. Let the killed tasks settle, then ask again.
        while time.monotonic() < deadline:
            response = self._http.post("/api/v2/backfills", json=body)
            if not (response.status_code == 503 or (response.status_code == 409 and locked)
                    or (response.status_code == 500 and "Database error" in response.text)):
                break
            locked = True
            time.sleep(LOCKED_CREATE_SETTLE_S if response.status_code == 503 else 2)
        return self._check(response, f"backfill of {dag_id}").json()

    def backfills(self, dag_id: str) -> list[dict]:
        """The DAG's backfills, completed ones included."""
        return self._get("/api/v2/backfills", dag_id=dag_id, limit=100)["backfills"]

    def wait_for_backfill(self, backfill_id: int, timeout: float = 600.0) -> dict:
        """The backfill once Airflow marks it completed (every run of it finished)."""
        deadline = time.monotonic() + timeout
        while not (backfill := self._get(f"/api/v2/backfills/{backfill_id}")).get("completed_at"):
            if time.monotonic() > deadline:
                raise AirflowHarnessError(f"backfill {backfill_id} did not complete within {timeout:.0f} s: {backfill}")
            time.sleep(2)
        return backfill

    def runs(self, dag_id: str, run_type: str | None = None) -> list[dict]:
        """The DAG's runs, oldest first (``run_type``: scheduled, manual, backfill, asset_triggered)."""
        params = {"order_by": "logical_date", "limit": 100, **({"run_type": run_type} if run_type else {})}
        return self._get(f"/api/v2/dags/{_p(dag_id)}/dagRuns", **params)["dag_runs"]

    def run(self, dag_id: str, run_id: str) -> dict:
        return self._get(f"/api/v2/dags/{_p(dag_id)}/dagRuns/{_p(run_id)}")

    def triggering_events(self, dag_id: str, run_id: str) -> list[dict]:
        """The Asset events the run was triggered by (each with its ``extra``: a trigger's payload
        under ``extra["payload"]``)."""
        return self._get(f"/api/v2/dags/{_p(dag_id)}/dagRuns/{_p(run_id)}/upstreamAssetEvents")["asset_events"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 120.0) -> str:
        """Wait until the run is ``success`` or ``failed``; return that state.

        On timeout the message lists every task's state, so a stuck
        ``queued`` (paused DAG, dead scheduler) is told apart from a slow task.
        """
        deadline = time.monotonic() + timeout
        while True:
            state = self._until(deadline, lambda: self.run(dag_id, run_id), f"waiting for run {run_id}")["state"]
            if state in FINISHED_RUN_STATES:
                return state
            if time.monotonic() > deadline:
                tasks = {t["task_id"]: t["state"] for t in self.task_instances(dag_id, run_id)}
                raise AirflowHarnessError(
                    f"run {run_id} of {dag_id} still {state!r} after {timeout:.0f} s; tasks: {tasks}. "
                    "A queued run of a paused DAG needs unpause(); otherwise check the scheduler's log."
                )
            time.sleep(0.5)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        """Each task instance of the run (task_id, state, try_number, map_index, ...)."""
        return self._get(f"/api/v2/dags/{_p(dag_id)}/dagRuns/{_p(run_id)}/taskInstances", limit=100)[
            "task_instances"
        ]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        return {
            (t["task_id"] if t["map_index"] < 0 else f"{t['task_id']}[{t['map_index']}]"): t["state"]
            for t in self.task_instances(dag_id, run_id)
        }

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict:
        """One task instance, its ``rendered_fields`` included (what the UI shows as rendered templates)."""
        return self._get(f"/api/v2/dags/{_p(dag_id)}/dagRuns/{_p(run_id)}/taskInstances/{_p(task_id)}")

    def xcom_values(self, dag_id: str, run_id: str) -> dict[tuple[str, str], Any]:
        """Every XCom of the run as stored: (task id, key) -> value."""
        path = f"/api/v2/dags/{_p(dag_id)}/dagRuns/{_p(run_id)}/taskInstances"
        entries = self._get(f"{path}/~/xcomEntries", limit=100)["xcom_entries"]
        return {(e["task_id"], e["key"]): self._get(f"{path}/{_p(e['task_id'])}/xcomEntries/{_p(e['key'])}",
                                                    map_index=e["map_index"])["value"] for e in entries}

    def task_log_content(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1,
                         map_index: int = -1, missing_ok: bool = False) -> str | list | None:
        """The task's log as the API gives it: text, or a list of structured events. ``missing_ok``: None
        for a try the API knows nothing of (a try that never started has no task instance history)."""
        response = self._http.get(
            f"/api/v2/dags/{_p(dag_id)}/dagRuns/{_p(run_id)}/taskInstances/{_p(task_id)}/logs/{try_number}",
            params={"full_content": "true", "map_index": map_index},
            headers={"Accept": "application/json"},
        )
        if missing_ok and response.status_code == 404:
            return None
        return self._check(response, f"log of {dag_id}.{task_id} in {run_id}").json().get("content")

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1) -> str:
        """The task's log as text (one line per event), for error messages."""
        content = self.task_log_content(dag_id, run_id, task_id, try_number, map_index)
        if isinstance(content, str):
            return content
        lines = []
        for entry in content or []:
            if not isinstance(entry, dict):
                lines.append(str(entry))
                continue
            lines.append(" ".join(str(entry[k]) for k in ("timestamp", "level", "event") if entry.get(k)))
            # A failure's exception is structured, not in "event": show it the way a traceback ends.
            for error in entry.get("error_detail") or []:
                frames = error.get("frames") or []
                lines += [f"  File {f.get('filename')}, line {f.get('lineno')}, in {f.get('name')}" for f in frames[-3:]]
                lines.append(f"{error.get('exc_type')}: {error.get('exc_value')}")
        return "\n".join(lines)

    def explain(self, dag_id: str, run_id: str, log_lines: int = 15) -> str:
        """The run's state, every task's state, and the log tail of each failed task.

        Meant for assertion and error messages: a failed end-to-end run then
        says which task failed and why without opening Airflow.
        """
        tasks = self.task_instances(dag_id, run_id)
        parts = [f"run {run_id} of {dag_id} is {self.run(dag_id, run_id)['state']}; tasks: "
                 + ", ".join(f"{t['task_id']}={t['state']}" for t in tasks)]
        for t in tasks:
            if t["state"] == "failed":
                log = self.task_log(dag_id, run_id, t["task_id"], max(t["try_number"], 1), t["map_index"])
                tail = "\n".join(log.splitlines()[-log_lines:])
                parts.append(f"--- {t['task_id']} (try {t['try_number']}) log tail:\n{tail}")
        return "\n".join(parts)

    def set_run_state(self, dag_id: str, run_id: str, state: str) -> None:
        """Mark the run ``state`` (success, failed, queued), as the UI's buttons do."""
        response = self._http.patch(f"/api/v2/dags/{_p(dag_id)}/dagRuns/{_p(run_id)}", json={"state": state})
        self._check(response, f"mark {run_id} of {dag_id} {state}")

    def clear_run(self, dag_id: str, run_id: str, only_failed: bool = False) -> None:
        """Clear the run's task instances so the scheduler runs them again (a "re-run")."""
        response = self._http.post(
            f"/api/v2/dags/{_p(dag_id)}/dagRuns/{_p(run_id)}/clear",
            json={"dry_run": False, "only_failed": only_failed},
        )
        self._check(response, f"clear {run_id} of {dag_id}")
