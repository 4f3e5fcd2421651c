"""The onceflow API and pages, mounted in Airflow's api-server at ``/onceflow``.

Every route authenticates with Airflow's own auth manager (the UI's ``_token``
cookie, or a Bearer token from ``POST /auth/token``): no token is 401, a user
who may not read the DAG's runs is 403. Reading needs GET on the DAG's runs;
splitting or skipping a batch needs PUT on them (what triggering or clearing a
run needs), a paused DAG and a JSON body (which a form on another site cannot
send), and is recorded with the signed-in user's name.

    GET /onceflow/api/pipelines                       the pipelines this user may see
        ?health=true[&needs_person=true]              with each one's health (listing.row); only those that need a person
    GET /onceflow/api/pipelines/{dag_id}              overview: latest batch, lag, open transactions, a page of batches
    GET /onceflow/api/pipelines/{dag_id}/batches      ?before=<batch seq>&limit=N, newest first
    GET /onceflow/api/pipelines/{dag_id}/runs/{run_id}  the batch an Airflow run planned
    POST /onceflow/api/pipelines/{dag_id}/batches/{seq}/split  {"records": N, "reason": R}  (onceflow split)
    POST /onceflow/api/pipelines/{dag_id}/batches/{seq}/skip   {"reason": R}               (onceflow skip)
    GET /onceflow/[?needs=person]  /onceflow/dags/{dag_id}  /onceflow/dags/{dag_id}/runs/{run_id}   the same as pages
"""

from __future__ import annotations

import threading
import time
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import AfterValidator, BaseModel, Field

from onceflow.core.planning.interventions import is_blank
from onceflow.pipeline.spec import INTERVAL
from onceflow.airflow.ui import overview as data
from onceflow.airflow.ui.charts import stacked_bars
from onceflow.airflow.ui.health import Expected
from onceflow.airflow.ui.listing import Listed, pipeline_list
from onceflow.airflow.ui.schedule import expected_of

MAX_PAGE = 100


def _runs_access(method: str):
    """Airflow must let the user ``method`` the DAG's runs: GET to read them, PUT to trigger or clear one."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    return Depends(requires_access_dag(method, DagAccessEntity.RUN))


def _user():
    from airflow.api_fastapi.core_api.security import get_user

    return Depends(get_user)


class Pipelines:
    """The onceflow pipelines Airflow knows, by DAG id, read from the serialized
    DAGs (the commit task's ``doc_json``): the api-server never runs DAG code.
    Lookups, misses included, are kept ``TTL_S`` seconds."""

    TTL_S = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Any]] = {}
        self._dags: dict[str, tuple[float, str | None, Any]] = {}  # dag_id: (looked up, hash, _load's answer)

    def _cached(self, key: str, load):
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit and now - hit[0] < self.TTL_S:
                return hit[1]
        value = load()
        with self._lock:
            self._cache[key] = (now, value)
        return value

    def dag_ids(self) -> list[str]:
        """DAGs tagged ``onceflow`` that Airflow has not marked stale."""

        def load() -> list[str]:
            from airflow.models.dag import DagModel, DagTag
            from airflow.utils.session import create_session
            from sqlalchemy import select

            with create_session() as session:
                query = select(DagModel.dag_id).join(DagTag, DagTag.dag_id == DagModel.dag_id).where(
                    DagTag.name == "onceflow", DagModel.is_stale.is_(False))
                return sorted(session.scalars(query))

        return self._cached("", load)

    @staticmethod
    def _load(dag) -> tuple[Any, Expected] | None:
        """The DeployedPipeline a serialized DAG carries and what the DAG promises (``schedule.expected_of``)."""
        from onceflow.airflow.deployed import COMMIT_TASK_ID, DeployedPipeline

        if not dag.has_task(COMMIT_TASK_ID):
            return None
        deployed = DeployedPipeline.from_doc(dag.dag_id, dag.get_task(COMMIT_TASK_ID).doc_json)
        return None if deployed is None else (deployed, expected_of(dag, deployed.spec))

    def refresh(self, dag_ids: list[str]) -> None:
        """Look up, in one query, the DAGs whose lookup is older than ``TTL_S``; only a DAG whose
        serialized form changed (its hash) is deserialized again: the list looks up fifty."""
        from airflow.models.serialized_dag import SerializedDagModel

        now = time.monotonic()
        with self._lock:
            stale = [d for d in dag_ids if d not in self._dags or now - self._dags[d][0] >= self.TTL_S]
        if not stale:
            return
        rows = {row.dag_id: row for row in SerializedDagModel.get_latest_serialized_dags(dag_ids=stale)}
        for dag_id in stale:
            row, kept = rows.get(dag_id), self._dags.get(dag_id)
            if row is None:
                entry = (now, None, None)
            elif kept and kept[1] == row.dag_hash:
                entry = (now, kept[1], kept[2])
            else:
                entry = (now, row.dag_hash, self._load(row.dag))
            with self._lock:
                self._dags[dag_id] = entry

    def _found(self, dag_id: str) -> tuple[Any, Expected] | None:
        self.refresh([dag_id])
        return self._dags[dag_id][2]

    def find(self, dag_id: str):
        """The DeployedPipeline of ``dag_id``, or None."""
        found = self._found(dag_id)
        return found[0] if found else None

    def expected(self, dag_id: str) -> Expected:
        return self._found(dag_id)[1]

    def get(self, dag_id: str):
        found = self.find(dag_id)
        if found is None:
            raise HTTPException(404, f"DAG {dag_id!r} is not an onceflow pipeline (no pipeline_dag call builds it)")
        return found

    def runtime(self, dag_id: str):
        """The pipeline's runtime, its connections looked up once per ``TTL_S`` (the list opens fifty); a
        redeployed DAG (a new hash) gets a runtime of its new spec at once."""
        deployed = self.get(dag_id)
        with self._lock:
            dag_hash = self._dags[dag_id][1]
        return self._cached(f"runtime:{dag_id}:{dag_hash}", lambda: deployed.runtime(identity=f"airflow-ui:{dag_id}"))

    def listed(self, dag_id: str) -> Listed | None:
        """What the list needs of ``dag_id``; None if it stopped being a pipeline since it was listed."""
        deployed = self.find(dag_id)
        if deployed is None:
            return None
        return Listed(dag_id, deployed.spec.name, lambda: self.runtime(dag_id), self.expected(dag_id))


PIPELINES = Pipelines()


def _may(user, method: str, dag_id: str) -> bool:
    """Whether Airflow lets ``user`` ``method`` the runs of ``dag_id`` (what ``_runs_access`` requires of a route)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return get_auth_manager().is_authorized_dag(method=method, access_entity=DagAccessEntity.RUN,
                                                details=DagDetails(id=dag_id), user=user)


def _visible_dag_ids(user) -> list[str]:
    """The pipelines whose runs ``user`` may read."""
    dag_ids = PIPELINES.dag_ids()
    PIPELINES.refresh(dag_ids)
    return [dag_id for dag_id in dag_ids if PIPELINES.find(dag_id) is not None and _may(user, "GET", dag_id)]


def _dag_paused(dag_id: str) -> bool:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        dag = session.get(DagModel, dag_id)
        return bool(dag and dag.is_paused)


def _run_batch(dag_id: str, run_id: str) -> dict[str, Any]:
    from onceflow.pipeline.runtime import RUN_LOOKBACK

    runtime = PIPELINES.runtime(dag_id)
    status = runtime.batch_of_run(run_id)
    if status is None:
        raise HTTPException(404, f"run {run_id!r} of {dag_id!r} planned no batch (yet, or among the latest {RUN_LOOKBACK})")
    now = data.now_ms()
    return {"dag_id": dag_id, "pipeline": runtime.spec.name, "now_ms": now, "batch": data.page_row(status, runtime.spec, now)}


# No OpenAPI document or docs pages: every path here answers only to an authorized user.
app = FastAPI(title="onceflow", description=__doc__.split("\n\n")[0], docs_url=None, redoc_url=None, openapi_url=None)


def _health_list(user, needs_person: bool) -> tuple[list[dict[str, Any]], dict[str, float], int]:
    """The rows of the pipelines ``user`` may read (only those that need a person, if asked), the
    time each part took, and how many need a person in all."""
    started = time.perf_counter()
    listed = [found for d in _visible_dag_ids(user) if (found := PIPELINES.listed(d)) is not None]
    looked_up = (time.perf_counter() - started) * 1000
    rows, timing = pipeline_list(listed)
    flagged = sum(r["needs_person"] for r in rows)
    timing = {"dags": looked_up, **timing, "total": looked_up + timing["total"]}
    return [r for r in rows if r["needs_person"] or not needs_person], timing, flagged


def _server_timing(timing: dict[str, float]) -> dict[str, str]:
    """The list's time as a Server-Timing header: a browser's devtools (and the browser test) read it."""
    return {"Server-Timing": ", ".join(f"{name};dur={ms:.1f}" for name, ms in timing.items())}


@app.get("/api/pipelines")
def list_pipelines(health: bool = False, needs_person: bool = False, user=_user()) -> Any:
    """?health=true: each pipeline's health as the list shows it; &needs_person=true: only those that need a person."""
    if not (health or needs_person):
        return {"pipelines": [{"dag_id": d, "pipeline": PIPELINES.get(d).spec.name} for d in _visible_dag_ids(user)]}
    rows, timing, flagged = _health_list(user, needs_person)
    return JSONResponse({"pipelines": rows, "needs_person": flagged, "timing_ms": timing}, headers=_server_timing(timing))


@app.get("/api/pipelines/{dag_id}", dependencies=[_runs_access("GET")])
def pipeline_overview(dag_id: str, limit: int = Query(data.PAGE_SIZE, ge=1, le=MAX_PAGE)) -> dict[str, Any]:
    return data.overview(PIPELINES.runtime(dag_id), dag_id, limit=limit)


@app.get("/api/pipelines/{dag_id}/batches", dependencies=[_runs_access("GET")])
def pipeline_batches(dag_id: str, before: int | None = Query(None, ge=1),
                     limit: int = Query(data.PAGE_SIZE, ge=1, le=MAX_PAGE)) -> dict[str, Any]:
    return data.batch_page(PIPELINES.runtime(dag_id), before, limit)


@app.get("/api/pipelines/{dag_id}/runs/{run_id:path}", dependencies=[_runs_access("GET")])
def run_batch(dag_id: str, run_id: str) -> dict[str, Any]:
    return _run_batch(dag_id, run_id)


# -- split and skip -------------------------------------------------------------

def _words(text: str) -> str:
    if is_blank(text):
        raise ValueError("is blank: the ledger records why, in words")
    return text


Reason = Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(_words)]


class SplitRequest(BaseModel):
    records: int = Field(ge=1, description="the most records per partition the next batch replays")
    reason: Reason


class SkipRequest(BaseModel):
    reason: Reason


def _intervene(dag_id: str, seq: int, user, act) -> dict[str, Any]:
    """Run ``act(runtime, by)`` (interventions.split_batch or skip_batch); refusals are 409."""
    from onceflow.core.errors import InterventionRefused

    # An intervention writes to the ledger: a runtime of its own, the connections as they are now, not the list's.
    runtime = PIPELINES.get(dag_id).runtime(identity=f"airflow-ui:{dag_id}")
    if not _dag_paused(dag_id):
        raise HTTPException(409, f"pause the DAG {dag_id!r} first, so that no run replays batch {seq} meanwhile; "
                                 "unpause it afterwards and the next run follows the split or skip")
    try:
        intervention = act(runtime, user.get_name())
    except InterventionRefused as exc:
        raise HTTPException(409, str(exc)) from None
    except Exception as exc:  # Kafka or the warehouse failed: say so, rather than a bare 500
        raise HTTPException(503, f"{type(exc).__name__}: {exc}. Try again: a split or skip is recorded at most "
                                 "once, and a skip's copy to the quarantine keeps the files it finished") from exc
    status = runtime.reader.describe(seq)
    return {"intervention": intervention.to_dict(), "batch": data.page_row(status, runtime.spec, data.now_ms())}


@app.post("/api/pipelines/{dag_id}/batches/{seq}/split", dependencies=[_runs_access("PUT")])
def split_batch(dag_id: str, request: SplitRequest, seq: int = Path(ge=1), user=_user()) -> dict[str, Any]:
    from onceflow.pipeline import quarantine as interventions

    return _intervene(dag_id, seq, user,
                      lambda runtime, by: interventions.split_batch(runtime, seq, request.records, by, request.reason))


@app.post("/api/pipelines/{dag_id}/batches/{seq}/skip", dependencies=[_runs_access("PUT")])
def skip_batch(dag_id: str, request: SkipRequest, seq: int = Path(ge=1), user=_user()) -> dict[str, Any]:
    from onceflow.pipeline import quarantine as interventions

    return _intervene(dag_id, seq, user, lambda runtime, by: interventions.skip_batch(runtime, seq, by, request.reason))


# -- pages ------------------------------------------------------------------------

def _render(template: str, **context: Any) -> HTMLResponse:
    from onceflow.airflow.ui.pages import render

    return HTMLResponse(render(template, **context))


@app.get("/", response_class=HTMLResponse)
def index_page(needs: str | None = Query(None, pattern="^person$"), user=_user()) -> HTMLResponse:
    """The pipelines and their health; ``?needs=person``: only those that need a person."""
    rows, timing, flagged = _health_list(user, needs == "person")
    page = _render("index.html", pipelines=rows, needs_person=flagged, filtered=needs == "person")
    page.headers.update(_server_timing(timing))
    return page


@app.get("/dags/{dag_id}", response_class=HTMLResponse, dependencies=[_runs_access("GET")])
def pipeline_page(dag_id: str, before: int | None = Query(None, ge=1),
                  limit: int = Query(data.PAGE_SIZE, ge=1, le=MAX_PAGE), user=_user()) -> HTMLResponse:
    runtime = PIPELINES.runtime(dag_id)
    view = data.overview(runtime, dag_id, before=before, limit=limit)
    latest = view["latest"]
    # The latest batch, aborted and not intervened on, of an offsets pipeline: a user who may run the DAG can split or skip it.
    intervention = None
    if (latest and latest["state"] == "aborted" and not latest["intervention"] and runtime.spec.batches != INTERVAL
            and _may(user, "PUT", dag_id)):
        intervention = {"seq": latest["batch_seq"], "paused": _dag_paused(dag_id)}
    chronological = list(reversed(view["batches"]))
    labels = [b["batch"] for b in chronological]
    outputs = sorted({name for b in chronological for name in b["votes"]})
    records = stacked_bars("Records per batch, by output", labels,
                           {name: [b["votes"].get(name) or 0 for b in chronological] for name in outputs}, "records")
    stages = sorted({s for b in chronological for s in b["stages_ms"]}, key=data.STAGE_ORDER.index)
    durations = stacked_bars("Batch duration by stage", labels,
                             {s: [b["stages_ms"].get(s, 0) / 1000 for b in chronological] for s in stages}, "s")
    backlog = stacked_bars("Input lag when each batch was planned", labels,
                           {"records behind": [b["backlog"] or 0 for b in chronological]}, "records")
    return _render("pipeline.html", view=view, charts=[records, durations, backlog], intervention=intervention)


@app.get("/dags/{dag_id}/runs/{run_id:path}", response_class=HTMLResponse, dependencies=[_runs_access("GET")])
def run_page(dag_id: str, run_id: str) -> HTMLResponse:
    return _render("run.html", view=_run_batch(dag_id, run_id), run_id=run_id)
