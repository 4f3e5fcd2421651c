"""What the onceflow page shows of one pipeline, as plain data (the JSON API
returns it, the HTML pages render it). Reads the ledger a page at a time and
asks Kafka for the input's last stable offsets; never lists the ledger."""

from __future__ import annotations

import threading
import time
from typing import Any

from onceflow.core.states import BatchState
from onceflow.sinks import open_transactions_of
from onceflow.core.lag import input_lag
from onceflow.core.batch_view import STAGES, batch_row, batch_rows

PAGE_SIZE = 25
LAG_TIMEOUT_S = 3.0
LAG_TTL_S = 15.0
_LAG: dict[str, tuple[float, list, str | None]] = {}
_LAG_LOCK = threading.Lock()
# Open transactions turn to a warning once this fraction of their timeout is gone.
WARN_FROM = 0.5
STAGE_ORDER = tuple(name for name, _start, _end in STAGES)
# States whose votes' transactions may still be open (an abort ends them too, once applied).
_HOLDS_TRANSACTIONS = (BatchState.PREPARING, BatchState.PREPARED, BatchState.COMMITTING, BatchState.ABORTING)


def now_ms() -> int:
    return int(time.time() * 1000)


def open_transactions(status, spec, now: int) -> list[dict[str, Any]]:
    """Transactions the batch's votes hold open (until the decision is applied
    to their output), with how much of their timeout is gone. The timeout is
    the sink's as the spec says it now."""
    if status.state not in _HOLDS_TRANSACTIONS:
        return []
    pending = {name: vote for name, vote in status.votes.items() if name not in status.done}  # done: ended
    return [
        {
            "batch": status.batch_id, "sink": name, "transactional_id": txn.transactional_id,
            "split": txn.split, "started_ms": txn.started_ms, "timeout_ms": txn.timeout_ms,
            "deadline_ms": txn.deadline_ms, "remaining_ms": max(0, txn.deadline_ms - now),
            "used": round(txn.used(now), 4), "warning": txn.used(now) >= WARN_FROM,
        }
        for name, txn in open_transactions_of(spec, pending)
    ]


def dead_letters(row: dict[str, Any], spec) -> int | None:
    """Records of the batch that went to its dead-letter outputs (None: the pipeline declares none)."""
    outputs = [s.name for s in spec.sinks if s.dead_letter]
    return sum(row["votes"].get(name) or 0 for name in outputs) if outputs else None


def page_row(status, spec, now: int) -> dict[str, Any]:
    """``status.batch_row`` and what only the page shows."""
    row = batch_row(status)
    row["open_transactions"] = open_transactions(status, spec, now)
    row["dead_letters"] = dead_letters(row, spec)
    return row


def batch_page(runtime, before: int | None = None, limit: int = PAGE_SIZE, now: int | None = None) -> dict[str, Any]:
    """Batches newest first: up to ``limit`` below ``before`` (default: from the latest)."""
    reader = runtime.reader
    now = now_ms() if now is None else now
    newest = reader.latest_seq() if before is None else min(before - 1, reader.latest_seq())
    rows = batch_rows(reader, limit, newest, row=lambda status: page_row(status, runtime.spec, now))
    oldest = rows[-1]["batch_seq"] if rows else 0
    return {"batches": rows, "next_before": oldest if oldest > 1 else None}


def lag_of(runtime, dag_id: str, now: int) -> tuple[list[dict[str, Any]], str | None]:
    """The input lag, asked of Kafka at most every ``LAG_TTL_S`` per pipeline and
    within ``LAG_TIMEOUT_S`` a request: a page never holds an api-server thread
    for long, whatever Kafka does."""
    with _LAG_LOCK:
        hit = _LAG.get(dag_id)
    if hit and time.monotonic() - hit[0] < LAG_TTL_S:
        return hit[1], hit[2]
    try:
        lag = input_lag(runtime, now, timeout_s=LAG_TIMEOUT_S)
    except Exception as exc:  # Kafka down: the ledger part of the page still helps (not cached: ask again next time)
        return [], f"Kafka did not answer within {LAG_TIMEOUT_S:g} s ({type(exc).__name__})"
    with _LAG_LOCK:
        _LAG[dag_id] = (time.monotonic(), lag, None)
    return lag, None


def overview(runtime, dag_id: str, before: int | None = None, limit: int = PAGE_SIZE) -> dict[str, Any]:
    """Everything the pipeline page shows."""
    now = now_ms()
    page = batch_page(runtime, before, limit, now)
    lag, lag_error = lag_of(runtime, dag_id, now)
    latest = page["batches"][0] if page["batches"] and before is None else None
    return {
        "dag_id": dag_id,
        "pipeline": runtime.spec.name,
        "topics": list(runtime.spec.topics),
        "sinks": [{"name": s.name, "kind": s.kind, "target": s.target, "guarantee": s.guarantee} for s in runtime.spec.sinks],
        "now_ms": now,
        "latest": latest,
        "lag": lag,
        "lag_error": lag_error,
        "open_transactions": [t for row in page["batches"] for t in row["open_transactions"]],
        **page,
    }
