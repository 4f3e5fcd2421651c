"""``onceflow status``: the batches of a pipeline, newest first (tooling; reads the ledger)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from .protocol.batch_id import BatchId


def batch_rows(coordinator, limit: int = 20) -> list[dict[str, Any]]:
    latest = coordinator.latest_seq()
    rows = []
    for seq in range(latest, max(0, latest - limit), -1):
        status = coordinator.describe(seq)
        if status is None:
            continue
        rows.append(
            {
                "batch": status.batch_id,
                "state": status.state.value,
                "records": status.plan.records,
                "ranges": [r.to_dict() for r in status.plan.ranges],
                "replay_of": status.plan.replay_of,
                "attempt": status.attempt,
                "votes": {name: vote.records for name, vote in status.votes.items()},
                "missing_votes": list(status.missing_votes),
                "decision": None if status.decision is None else status.decision.outcome.value,
                "decided_by": None if status.decision is None else status.decision.decided_by,
                "reason": None if status.decision is None else status.decision.reason,
                "timings_ms": dict(status.timings),
            }
        )
    return rows


def _when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if ms else "-"


def format_rows(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no batches yet"
    lines = [f"{'batch':<11} {'state':<11} {'records':>8} {'attempt':>7}  {'planned (UTC)':<19}  decision"]
    for r in rows:
        ranges = ", ".join(f"{x['topic']}[{x['partition']}] {x['start']}..{x['end']}" for x in r["ranges"])
        decision = f"{r['decision']} ({r['reason']})" if r["decision"] else "-"
        lines.append(
            f"{r['batch']:<11} {r['state']:<11} {r['records']:>8} {r['attempt']:>7}  {_when(r['timings_ms'].get('planned')):<19}  {decision}"
        )
        lines.append(f"{'':<11} ranges: {ranges}" + (f"; replays {BatchId(r['replay_of'])}" if r["replay_of"] else ""))
        if r["votes"] or r["missing_votes"]:
            lines.append(f"{'':<11} votes: {r['votes']}" + (f"; missing {r['missing_votes']}" if r["missing_votes"] else ""))
    return "\n".join(lines)
