"""What the onceflow page shows of one pipeline, as plain data (the JSON API
returns it, the HTML pages render it). Reads the ledger a page at a time and
asks Kafka for the input's last stable offsets; never lists the ledger."""

from __future__ import annotations

from typing import Any

from onceflow.airflow.ui.health import WARN_FROM
from onceflow.airflow.ui.lag_cache import LagCache
from onceflow.core.batch_view import STAGES, batch_row, batch_rows
from onceflow.core.coordinator import wall_clock_ms as now_ms  # the ledger's clock: the page's ages and countdowns
from onceflow.core.states import BatchState
from onceflow.sinks import open_transactions_of

PAGE_SIZE = 25
# Kafka is asked for a pipeline's lag at most every 15 s, each request within 3 s: a page never
# holds an api-server thread for long, whatever Kafka does.
LAG = LagCache(ttl_s=15.0, timeout_s=3.0)
# The pipeline page waits this long for Kafka's answer (a failing Kafka answers within a request's timeout).
PAGE_LAG_WAIT_S = 4 * LAG.timeout_s
STAGE_ORDER = tuple(name for name, _start, _end in STAGES)
# States whose votes' transactions may still be open (an abort ends them too, once applied).
_HOLDS_TRANSACTIONS = (BatchState.PREPARING, BatchState.PREPARED, BatchState.COMMITTING, BatchState.ABORTING)


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


def overview(runtime, dag_id: str, before: int | None = None, limit: int = PAGE_SIZE) -> dict[str, Any]:
    """Everything the pipeline page shows."""
    now = now_ms()
    page = batch_page(runtime, before, limit, now)
    lag = LAG.reading(dag_id, runtime, PAGE_LAG_WAIT_S)
    latest = page["batches"][0] if page["batches"] and before is None else None
    return {
        "dag_id": dag_id,
        "pipeline": runtime.spec.name,
        "topics": list(runtime.spec.topics),
        "sinks": [{"name": s.name, "kind": s.kind, "target": s.target, "guarantee": s.guarantee} for s in runtime.spec.sinks],
        "now_ms": now,
        "latest": latest,
        "lag": lag.rows,
        "lag_error": lag.error,
        "lag_pending": lag.pending,
        "open_transactions": [t for row in page["batches"] for t in row["open_transactions"]],
        **page,
    }
