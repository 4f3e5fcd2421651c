"""What the onceflow page shows of one pipeline, as plain data (the JSON API
returns it, the HTML pages render it). Reads the ledger a page at a time and
asks Kafka for the input's last stable offsets; never lists the ledger."""

from __future__ import annotations

import time
from typing import Any

from ..protocol.states import BatchState
from ..sinks import sink_kind
from ..lag import input_lag
from ..status import STAGES, batch_row

PAGE_SIZE = 25
# Open transactions turn to a warning once this fraction of their timeout is gone.
WARN_FROM = 0.5
STAGE_ORDER = tuple(name for name, _start, _end in STAGES)
_HOLDS_TRANSACTIONS = (BatchState.PREPARING, BatchState.PREPARED, BatchState.COMMITTING)


def now_ms() -> int:
    return int(time.time() * 1000)


def open_transactions(status, spec, now: int) -> list[dict[str, Any]]:
    """Transactions the batch's votes hold open (an undecided or committing
    batch), with how much of their timeout is gone."""
    if status.state not in _HOLDS_TRANSACTIONS:
        return []
    found = []
    for name, vote in sorted(status.votes.items()):
        if name in status.done:
            continue  # this output's decision is applied: its transactions are ended
        sink = spec.sink(name)
        for txn in sink_kind(sink.kind).open_transactions(sink, vote):
            used = txn.used(now)
            found.append(
                {
                    "batch": status.batch_id, "sink": name, "transactional_id": txn.transactional_id,
                    "split": txn.split, "started_ms": txn.started_ms, "timeout_ms": txn.timeout_ms,
                    "deadline_ms": txn.deadline_ms, "remaining_ms": max(0, txn.deadline_ms - now),
                    "used": round(used, 4), "warning": used >= WARN_FROM,
                }
            )
    return found


def dead_letters(row: dict[str, Any], spec) -> int | None:
    """Records of the batch that went to its dead-letter outputs (None: the pipeline declares none)."""
    outputs = [s.name for s in spec.sinks if s.dead_letter]
    return sum(row["votes"].get(name) or 0 for name in outputs) if outputs else None


def batch_page(runtime, before: int | None = None, limit: int = PAGE_SIZE, now: int | None = None) -> dict[str, Any]:
    """Batches newest first: up to ``limit`` below ``before`` (default: from the latest)."""
    coordinator = runtime.coordinator
    now = now_ms() if now is None else now
    newest = coordinator.latest_seq() if before is None else min(before - 1, coordinator.latest_seq())
    rows = []
    for seq in range(newest, max(0, newest - limit), -1):
        status = coordinator.describe(seq)
        if status is None:
            continue
        row = batch_row(status)
        row["open_transactions"] = open_transactions(status, runtime.spec, now)
        row["dead_letters"] = dead_letters(row, runtime.spec)
        rows.append(row)
    oldest = rows[-1]["batch_seq"] if rows else 0
    return {"batches": rows, "next_before": oldest if oldest > 1 else None}


def overview(runtime, dag_id: str, before: int | None = None, limit: int = PAGE_SIZE) -> dict[str, Any]:
    """Everything the pipeline page shows."""
    now = now_ms()
    page = batch_page(runtime, before, limit, now)
    try:
        lag, lag_error = input_lag(runtime, now), None
    except Exception as exc:  # Kafka down: the ledger part of the page still helps
        lag, lag_error = [], f"{type(exc).__name__}: {exc}"
    latest = page["batches"][0] if page["batches"] and before is None else None
    return {
        "dag_id": dag_id,
        "pipeline": runtime.spec.name,
        "topics": list(runtime.spec.topics),
        "sinks": [{"name": s.name, "kind": s.kind, "target": s.target} for s in runtime.spec.sinks],
        "now_ms": now,
        "latest": latest,
        "lag": lag,
        "lag_error": lag_error,
        "open_transactions": [t for row in page["batches"] for t in row["open_transactions"]],
        **page,
    }
