"""The pipeline list: each pipeline's health at a glance, fifty of them within a second.

Per pipeline it reads the latest batch and, when that is not committed, the newest committed
one its plan names (a constant number of ledger reads, never a listing), and takes the input lag
from the cache (``overview.LAG``). Pipelines are read side by side (``LEDGER_WORKERS`` at a time), Kafka
asked for each as its row is read (unless its answer is fresh). A pipeline with an answer kept
shows it, aged, while the new one comes; one with none is waited for until ``LIST_LAG_WAIT_S``
from the start, then shows its ledger's part and "asking Kafka".
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Sequence

from onceflow.airflow.ui.health import Expected, PipelineHealth, findings, needs_person
from onceflow.airflow.ui.lag_cache import LagReading
from onceflow.airflow.ui.overview import LAG, now_ms, page_row

LEDGER_WORKERS = 8
LIST_LAG_WAIT_S = 0.5
_POOL = ThreadPoolExecutor(LEDGER_WORKERS, thread_name_prefix="onceflow-list")


@dataclass(frozen=True)
class Listed:
    """A pipeline the user may read: its DAG id, its pipeline's name, how to open its runtime,
    what its DAG promises."""

    dag_id: str
    pipeline: str
    runtime: Callable[[], Any]
    expected: Expected


def ledger_health(runtime, listed: Listed, now: int) -> PipelineHealth:
    """What the ledger says: the latest batch and when the newest committed one finished."""
    reader = runtime.reader
    latest_seq = reader.latest_seq()
    status = reader.describe(latest_seq) if latest_seq else None
    latest = page_row(status, runtime.spec, now) if status else None
    if latest and latest["state"] == "committed":
        last_commit = latest["timings_ms"].get("done")
    else:  # the latest batch's plan names the commit below it: one read more, however many batches aborted since
        last_commit = reader.committed_at_ms(reader.committed_below(status.plan)) if status else None
    return PipelineHealth(listed.dag_id, listed.pipeline, listed.expected, now, latest, last_commit)


def _read(listed: Listed, now: int) -> tuple[PipelineHealth, Future | None]:
    """One pipeline: Kafka asked for its lag (answered later), then its ledger read."""
    try:
        runtime = listed.runtime()
        asked = LAG.ask(listed.dag_id, runtime)
        return ledger_health(runtime, listed, now), asked
    except Exception as exc:  # its connections or its warehouse: this row says so, the others are shown
        return PipelineHealth(listed.dag_id, listed.pipeline, listed.expected, now,
                              ledger_error=f"{type(exc).__name__}: {exc}"), None


def with_lag(health: PipelineHealth, reading: LagReading) -> PipelineHealth:
    return replace(health, records_behind=reading.records_behind, lag_error=reading.error,
                   kafka_silent=reading.kafka_silent, lag_pending=reading.pending,
                   oldest_uncommitted_age_s=reading.oldest_uncommitted_age_s(health.now_ms))


def row(health: PipelineHealth) -> dict[str, Any]:
    """One pipeline as the page and the API show it."""
    found = findings(health)
    latest = health.latest
    return {
        "dag_id": health.dag_id, "pipeline": health.pipeline, "schedule": health.expected.schedule,
        "latest": None if latest is None else {k: latest[k] for k in ("batch", "batch_seq", "state", "records", "timings_ms")},
        "records_behind": health.records_behind, "oldest_uncommitted_age_s": health.oldest_uncommitted_age_s,
        "last_commit_ms": health.last_commit_ms, "last_commit_age_s": health.last_commit_age_s,
        "open_transactions": len(health.open_transactions), "worst_used": health.worst_used,
        "lag_error": health.lag_error, "kafka_silent": health.kafka_silent, "lag_pending": health.lag_pending,
        "ledger_error": health.ledger_error,
        "needs_person": needs_person(found), "findings": [asdict(f) for f in found],
    }


def pipeline_list(pipelines: Sequence[Listed]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Every pipeline's row, in the order given, and where the time went (ms: ledger, kafka, total)."""
    started = time.perf_counter()
    now = now_ms()
    read = list(_POOL.map(lambda listed: _read(listed, now), pipelines))
    ledger_done = time.perf_counter()
    # Only pipelines with no answer kept wait; the others show theirs while Kafka is asked again.
    unanswered = [asked for health, asked in read if asked and LAG.kept(health.dag_id).pending]
    wait(unanswered, timeout=max(0.0, LIST_LAG_WAIT_S - (ledger_done - started)))
    rows = [row(health if health.ledger_error else with_lag(health, LAG.kept(health.dag_id))) for health, _ in read]
    ended = time.perf_counter()
    return rows, {"ledger": (ledger_done - started) * 1000, "kafka": (ended - ledger_done) * 1000,
                  "total": (ended - started) * 1000}
