"""How far a pipeline lags its input: per partition, the records between the
end of the last committed batch and the last stable offset, and the age of
the oldest of them (the UI page and the metrics show it)."""

from __future__ import annotations

import time
from typing import Any

from .protocol.states import BatchState


def _last_committed(coordinator) -> Any:
    head = coordinator.ledger.read_head()
    seq = coordinator.latest_seq()
    floor = head.last_committed_seq if head else 0
    while seq > 0 and seq >= floor:  # the head is a hint: confirm, walking back from the latest
        status = coordinator.describe(seq)
        if status is not None and status.state is BatchState.COMMITTED:
            return status
        seq -= 1
    return coordinator.describe(floor) if floor else None


def input_lag(runtime, now: int | None = None) -> list[dict[str, Any]]:
    """Per input partition: the committed end, the last stable offset, the
    records between them, and the age of the oldest record not yet committed."""
    now = int(time.time() * 1000) if now is None else now
    committed = _last_committed(runtime.coordinator)
    ends = {(r.topic, r.partition): r.end for r in committed.plan.ranges} if committed else {}
    with runtime.offset_source() as source:
        partitions = source.partitions(runtime.spec.topics)
        stable = source.last_stable_offsets(partitions)
        earliest = source.earliest_offsets(partitions)
        starts = {tp: ends.get((tp.topic, tp.partition), earliest[tp]) for tp in partitions}
        behind = {tp: starts[tp] for tp in partitions if stable[tp] > starts[tp]}
        stamps = source.timestamps_at(behind)
    rows = []
    for tp in partitions:
        stamp = stamps.get(tp)
        rows.append(
            {
                "topic": tp.topic, "partition": tp.partition, "committed_end": starts[tp],
                "last_stable": stable[tp], "lag": max(0, stable[tp] - starts[tp]),
                "oldest_uncommitted_age_s": None if stamp is None else max(0.0, (now - stamp) / 1000),
            }
        )
    return rows
