"""Whether a pipeline needs a person: the facts the pipeline list shows of it, and the one
table of rules (``RULES``) that judges them. Pure: the facts are read elsewhere
(``ui.listing``), and docs/ui.md prints the same table for users.

Every rule that matches is shown, in the table's order; a pipeline needs a person when one
of them says so. The others say what will happen without one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# Open transactions turn to a warning once this fraction of their timeout is gone.
WARN_FROM = 0.5
# Records waiting longer than this many schedule periods (and at least OVERDUE_FLOOR_S) are overdue.
OVERDUE_PERIODS = 3
# A floor, so that a batch longer than a short period is not overdue by its own length.
OVERDUE_FLOOR_S = 900.0
_UNFINISHED = ("planned", "preparing", "prepared", "committing", "aborting")


@dataclass(frozen=True)
class Expected:
    """What the pipeline's DAG promises, read from Airflow (``ui.schedule``). ``cadence_s``: the
    longest a record should wait for its run (a cron schedule's period, ``when_input``'s
    ``max_age_s``; None: runs are triggered by hand or by a count alone). ``stall_s``: how long an
    unfinished batch may record nothing before the next run recovers it."""

    cadence_s: float | None
    stall_s: float
    schedule: str = ""


@dataclass(frozen=True)
class PipelineHealth:
    """One pipeline as the list shows it, at ``now_ms``. ``latest``: the latest batch's row
    (``overview.page_row``; None before the first plan). Kafka's part is unknown when
    ``lag_error`` says why (``kafka_silent``: Kafka did not answer; else another cause), or while
    ``lag_pending``; the ledger's, when ``ledger_error`` does."""

    dag_id: str
    pipeline: str
    expected: Expected
    now_ms: int
    latest: dict[str, Any] | None = None
    last_commit_ms: int | None = None
    records_behind: int | None = None
    oldest_uncommitted_age_s: float | None = None
    lag_error: str | None = None
    kafka_silent: bool = False
    lag_pending: bool = False
    ledger_error: str | None = None

    @property
    def state(self) -> str | None:
        return self.latest["state"] if self.latest else None

    @property
    def last_commit_age_s(self) -> float | None:
        return None if self.last_commit_ms is None else max(0.0, (self.now_ms - self.last_commit_ms) / 1000)

    @property
    def quiet_s(self) -> float | None:
        """Seconds since the latest batch's last recorded step."""
        timings = self.latest["timings_ms"] if self.latest else {}
        return max(0.0, (self.now_ms - max(timings.values())) / 1000) if timings else None

    @property
    def open_transactions(self) -> list[dict[str, Any]]:
        return self.latest["open_transactions"] if self.latest else []

    @property
    def worst_used(self) -> float | None:
        """The largest fraction of its timeout any open transaction has used."""
        return max((t["used"] for t in self.open_transactions), default=None)

    @property
    def overdue_after_s(self) -> float | None:
        cadence = self.expected.cadence_s
        return None if cadence is None else max(OVERDUE_PERIODS * cadence, OVERDUE_FLOOR_S)


def age(seconds: float | None) -> str:
    """A duration as a person reads it: 42 s, 15 min, 3.5 h, 2.0 d."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}" if unit != "min" else f"{seconds / size:.0f} min"
    return f"{seconds:.0f} s"


def _failed(h: PipelineHealth) -> bool:
    return bool(h.latest and h.latest["failed"])


def _says_failed(h: PipelineHealth) -> str:
    step, task = ("commit", "commit") if h.latest["decision"] == "COMMIT" else ("abort", "rollback")
    return (f"the {step} of {', '.join(sorted(h.latest['failed']))} in batch {h.latest['batch']} failed: once fixed, "
            f"re-run the {task} task or `onceflow recover`")


def _lag_unknown(h: PipelineHealth) -> str:
    return f"{h.lag_error}: records behind unknown; the ledger's part is shown"


def _stuck(h: PipelineHealth) -> bool:
    return h.state in _UNFINISHED and h.quiet_s is not None and h.quiet_s > h.expected.stall_s


def _near_timeout(h: PipelineHealth) -> bool:
    return h.worst_used is not None and h.worst_used >= WARN_FROM


def _replay_aborted(h: PipelineHealth) -> bool:
    return h.state == "aborted" and bool(h.latest["replay_of"]) and not h.latest["intervention"]


def _overdue(h: PipelineHealth) -> bool:
    limit = h.overdue_after_s
    return (limit is not None and bool(h.records_behind) and h.oldest_uncommitted_age_s is not None
            and h.oldest_uncommitted_age_s > limit)


@dataclass(frozen=True)
class Rule:
    name: str            # the row's CSS class and the API's key
    label: str           # what the page's badge says
    needs_person: bool
    matches: Callable[[PipelineHealth], bool]
    says: Callable[[PipelineHealth], str]


RULES: tuple[Rule, ...] = (
    Rule("ledger_unreadable", "ledger unreadable", True, lambda h: h.ledger_error is not None,
         lambda h: f"its ledger or connections could not be read: {h.ledger_error}"),
    Rule("kafka_silent", "Kafka silent", True, lambda h: h.lag_error is not None and h.kafka_silent, _lag_unknown),
    Rule("lag_unreadable", "lag unreadable", True, lambda h: h.lag_error is not None and not h.kafka_silent,
         _lag_unknown),
    Rule("failed", "failed", True, _failed, _says_failed),
    Rule("stuck", "stuck", True, _stuck,
         lambda h: f"batch {h.latest['batch']} is {h.state} and nothing was recorded for {age(h.quiet_s)} "
                   f"(the next run recovers a batch after {age(h.expected.stall_s)}): is the DAG paused, or its scheduler down?"),
    Rule("near_timeout", "transactions near timeout", True, _near_timeout,
         lambda h: f"{len(h.open_transactions)} open transactions of batch {h.latest['batch']}, up to "
                   f"{h.worst_used:.0%} of their timeout used: the broker aborts them at 100%"),
    Rule("replay_aborted", "replay aborted", True, _replay_aborted,
         lambda h: f"batch {h.latest['batch']}, a replay, aborted too: split or skip it (its page has the form)"),
    Rule("overdue", "commits overdue", True, _overdue,
         lambda h: f"the oldest record not committed is {age(h.oldest_uncommitted_age_s)} old, over "
                   f"{OVERDUE_PERIODS} schedule periods ({age(h.overdue_after_s)})"),
    Rule("aborted", "aborted", False, lambda h: h.state == "aborted" and not _replay_aborted(h),
         lambda h: f"batch {h.latest['batch']} aborted: the next run "
                   + ("follows the split or skip recorded" if h.latest["intervention"] else "replays it")),
    Rule("lag_pending", "asking Kafka", False, lambda h: h.lag_pending and h.lag_error is None,
         lambda h: "Kafka has not answered yet: reload for the records behind"),
)


@dataclass(frozen=True)
class Finding:
    rule: str
    label: str
    needs_person: bool
    says: str


def findings(health: PipelineHealth) -> list[Finding]:
    """Every rule of ``RULES`` that matches, in the table's order."""
    return [Finding(r.name, r.label, r.needs_person, r.says(health)) for r in RULES if r.matches(health)]


def needs_person(found: list[Finding]) -> bool:
    return any(f.needs_person for f in found)
