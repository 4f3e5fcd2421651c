"""The ledger of one pipeline: typed, immutable records over a LedgerStorage.

Layout under ``<root>/_onceflow/<pipeline>/``::

    _head.json                                  hint: latest seq (overwritten)
    batches/<batch id>/plan.json                the plan (I6)
    batches/<seq>/attempts/<n:04d>.json         attempt n claimed (fencing, I5)
    batches/<seq>/attempts/<n>/votes/<p>.json   participant p's vote in attempt n
    batches/<seq>/decision.json                 COMMIT or ABORT, once (I2)
    batches/<seq>/done/<p>.json                 participant p applied the decision
    batches/<seq>/done/_batch.json              every effect applied: batch finished
    batches/<seq>/failed/<p>.json               note: p's last FAILED commit or abort (overwritten)
    batches/<seq>/intervention.json             an operator split or skipped the aborted batch
    boundaries/<instant ms>.json                interval pipelines: where an instant falls in the log
    intervals/<start ms>-<end ms>/<n:04d>.json  interval pipelines: the interval's n-th batch
    _prefix.json                                interval pipelines: hint, end of the committed prefix (overwritten)

Every record but the two hints (head, prefix) and the failure notes is written with
create-if-absent and never changes. A create that loses returns the record that won, so callers follow
the winner. Batches are contiguous (seq n exists only if n-1 does), and so
are attempts and an interval's batches, which is what lets ``latest_seq``,
``latest_attempt`` and ``latest_interval_index`` find the end with a bounded
probe instead of a listing.

Runs wherever the coordinator runs: Airflow worker or Spark driver.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from onceflow.core import faults
from onceflow.config.warehouse_layout import pipeline_dir
from onceflow.core.batch_id import BatchId
from onceflow.core.planning.intervals import Boundary, Interval
from onceflow.core.planning.interventions import Intervention
from onceflow.core.participant import Vote
from onceflow.core.plan import Plan
from onceflow.core.ledger.errors import LedgerCorruptError
from onceflow.core.ledger.records import (
    AttemptClaim,
    Decision,
    DoneMarker,
    FailedEffect,
    Head,
    IntervalBatch,
    PrefixHint,
    Kind,
    RecordedVote,
    decode,
    encode,
)
from onceflow.core.ledger.storage import LedgerStorage
from onceflow.config.settings import ConfigurationError

BATCH_EFFECT = "_batch"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")

# Fault points around every ledger write (declared here so chaos tooling sees them).
for _kind in Kind:
    faults.declare(f"ledger.{_kind.value}.before_write", f"before the {_kind.value} record is written")
    faults.declare(f"ledger.{_kind.value}.after_write", f"after the {_kind.value} record is written")


def check_name(what: str, name: str) -> str:
    """Pipeline and participant names become path segments: keep them plain."""
    if not _NAME.match(name) or name == BATCH_EFFECT:
        raise ConfigurationError(
            f"{what} name {name!r} is not usable in ledger paths: use letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


class BatchLedger:
    """Typed access to one pipeline's ledger. Each method is one or a few
    storage requests; none lists."""

    def __init__(self, storage: LedgerStorage, pipeline: str):
        self.storage = storage
        self.pipeline = check_name("pipeline", pipeline)
        self.base = pipeline_dir(pipeline)

    def __repr__(self) -> str:
        return f"BatchLedger({self.storage!r}, {self.pipeline!r})"

    # -- paths ---------------------------------------------------------------
    def batch_dir(self, seq: int) -> str:
        return f"{self.base}/batches/{BatchId(seq)}"

    def plan_key(self, seq: int) -> str:
        return f"{self.batch_dir(seq)}/plan.json"

    def attempt_key(self, seq: int, attempt: int) -> str:
        return f"{self.batch_dir(seq)}/attempts/{attempt:04d}.json"

    def vote_key(self, seq: int, attempt: int, participant: str) -> str:
        return f"{self.batch_dir(seq)}/attempts/{attempt:04d}/votes/{participant}.json"

    def decision_key(self, seq: int) -> str:
        return f"{self.batch_dir(seq)}/decision.json"

    def done_key(self, seq: int, effect: str) -> str:
        return f"{self.batch_dir(seq)}/done/{effect}.json"

    @property
    def head_key(self) -> str:
        return f"{self.base}/_head.json"

    # -- generic read / create ----------------------------------------------
    def _read(self, kind: Kind, key: str, seq: int | None) -> Any:
        data = self.storage.read(key)
        if data is None:
            return None
        batch = str(BatchId(seq)) if seq is not None else "-"
        return decode(kind, data, where=self.storage.describe(key), pipeline=self.pipeline, batch=batch)

    def _create(self, kind: Kind, key: str, seq: int | None, record: Any) -> tuple[bool, Any]:
        """(True, record) if written now, else (False, the record that was there)."""
        faults.fault_point(f"ledger.{kind.value}.before_write")
        created = self.storage.create(key, encode(kind, record))
        faults.fault_point(f"ledger.{kind.value}.after_write")
        if created:
            return True, record
        existing = self._read(kind, key, seq)
        if existing is None:
            raise LedgerCorruptError(
                f"{self.storage.describe(key)} of pipeline {self.pipeline!r}, batch {BatchId(seq) if seq else '-'} was reported to exist "
                "but cannot be read: the storage is not read-after-write consistent or the file was deleted. "
                "Restore it from backup; never delete ledger files."
            )
        return False, existing

    def _probe_end(self, exists: Callable[[int], bool], hint: int) -> int:
        """The largest n >= 0 with exists(n) (exists(0) is taken as true and
        exists is contiguous), starting from ``hint``. Gallops forward then
        bisects: O(log(distance from the hint)) calls, 1 when the hint is right."""
        low = max(hint, 0)
        if low > 0 and not exists(low):  # hint ahead of the truth (a restored ledger)
            return self._bisect(exists, 0, low)
        step = 1
        while exists(low + step):
            low, step = low + step, step * 2
        return self._bisect(exists, low, low + step)

    @staticmethod
    def _bisect(exists: Callable[[int], bool], low: int, high: int) -> int:
        # invariant: exists(low) (or low == 0), not exists(high)
        while high - low > 1:
            mid = (low + high) // 2
            if exists(mid):
                low = mid
            else:
                high = mid
        return low

    # -- plan ------------------------------------------------------------------
    def read_plan(self, seq: int) -> Plan | None:
        return self._read(Kind.PLAN, self.plan_key(seq), seq)

    def create_plan(self, plan: Plan) -> tuple[bool, Plan]:
        return self._create(Kind.PLAN, self.plan_key(plan.batch_seq), plan.batch_seq, plan)

    def plan_exists(self, seq: int) -> bool:
        return self.storage.read(self.plan_key(seq)) is not None

    def latest_seq(self) -> int:
        """The seq of the newest planned batch (0: none). One GET for the head
        hint plus about two probes when the hint is current; O(log n) when
        the hint is missing or far behind."""
        head = self.read_head()
        return self._probe_end(self.plan_exists, head.latest_seq if head else 0)

    # -- head hint -----------------------------------------------------------
    def read_head(self) -> Head | None:
        try:
            return self._read(Kind.HEAD, self.head_key, None)
        except LedgerCorruptError:
            return None  # only a hint: a torn or edited head costs a probe, never correctness

    def write_head(self, head: Head) -> None:
        faults.fault_point("ledger.head.before_write")
        self.storage.overwrite(self.head_key, encode(Kind.HEAD, head))
        faults.fault_point("ledger.head.after_write")

    # -- attempts --------------------------------------------------------------
    def read_attempt(self, seq: int, attempt: int) -> AttemptClaim | None:
        return self._read(Kind.ATTEMPT, self.attempt_key(seq, attempt), seq)

    def latest_attempt(self, seq: int, hint: int = 0) -> int:
        """The newest claimed attempt of batch ``seq`` (0: none)."""
        return self._probe_end(lambda n: self.storage.read(self.attempt_key(seq, n)) is not None, hint)

    def claim_attempt(self, seq: int, claimed_by: str, now_ms: int) -> AttemptClaim:
        """Claim the next attempt number: the first n whose create succeeds."""
        n = self.latest_attempt(seq) + 1
        while True:
            claim = AttemptClaim(seq, n, claimed_by, now_ms)
            created, _ = self._create(Kind.ATTEMPT, self.attempt_key(seq, n), seq, claim)
            if created:
                return claim
            n += 1

    # -- votes -----------------------------------------------------------------
    def read_vote(self, seq: int, attempt: int, participant: str) -> RecordedVote | None:
        return self._read(Kind.VOTE, self.vote_key(seq, attempt, participant), seq)

    def read_votes(self, seq: int, attempt: int, participants: Sequence[str]) -> tuple[dict[str, Vote], list[str], int]:
        """The votes of ``participants`` in ``attempt`` (0: none claimed), the participants without one,
        and when the last vote was recorded (epoch ms, 0 if none)."""
        votes: dict[str, Vote] = {}
        missing: list[str] = []
        last_ms = 0
        for name in participants:
            recorded = self.read_vote(seq, attempt, name) if attempt else None
            if recorded is None:
                missing.append(name)
            else:
                votes[name] = recorded.vote
                last_ms = max(last_ms, recorded.recorded_at_ms)
        return votes, missing, last_ms

    def create_vote(self, vote: Vote, now_ms: int) -> tuple[bool, RecordedVote]:
        check_name("participant", vote.participant)
        key = self.vote_key(vote.batch_seq, vote.attempt, vote.participant)
        return self._create(Kind.VOTE, key, vote.batch_seq, RecordedVote(vote, now_ms))

    # -- decision --------------------------------------------------------------
    def read_decision(self, seq: int) -> Decision | None:
        return self._read(Kind.DECISION, self.decision_key(seq), seq)

    def create_decision(self, decision: Decision) -> tuple[bool, Decision]:
        return self._create(Kind.DECISION, self.decision_key(decision.batch_seq), decision.batch_seq, decision)

    # -- done markers ----------------------------------------------------------
    def read_done(self, seq: int, effect: str) -> DoneMarker | None:
        return self._read(Kind.DONE, self.done_key(seq, effect), seq)

    def create_done(self, marker: DoneMarker) -> tuple[bool, DoneMarker]:
        return self._create(Kind.DONE, self.done_key(marker.batch_seq, marker.effect), marker.batch_seq, marker)

    # -- failure notes ---------------------------------------------------------
    def failed_key(self, seq: int, effect: str) -> str:
        return f"{self.batch_dir(seq)}/failed/{effect}.json"

    def read_failed(self, seq: int, effect: str) -> FailedEffect | None:
        try:
            return self._read(Kind.FAILED, self.failed_key(seq, effect), seq)
        except LedgerCorruptError:
            return None  # only a note: a torn one costs the reader the message, never correctness

    def write_failed(self, note: FailedEffect) -> None:
        faults.fault_point("ledger.failed.before_write")
        self.storage.overwrite(self.failed_key(note.batch_seq, note.effect), encode(Kind.FAILED, note))
        faults.fault_point("ledger.failed.after_write")

    # -- operator interventions -------------------------------------------------
    def intervention_key(self, seq: int) -> str:
        return f"{self.batch_dir(seq)}/intervention.json"

    def read_intervention(self, seq: int) -> Intervention | None:
        return self._read(Kind.INTERVENTION, self.intervention_key(seq), seq)

    def create_intervention(self, intervention: Intervention) -> tuple[bool, Intervention]:
        seq = intervention.batch_seq
        return self._create(Kind.INTERVENTION, self.intervention_key(seq), seq, intervention)

    # -- interval pipelines: boundaries ---------------------------------------------
    def boundary_key(self, instant_ms: int) -> str:
        return f"{self.base}/boundaries/{instant_ms:015d}.json"

    def read_boundary(self, instant_ms: int) -> Boundary | None:
        return self._read(Kind.BOUNDARY, self.boundary_key(instant_ms), None)

    def create_boundary(self, boundary: Boundary) -> tuple[bool, Boundary]:
        return self._create(Kind.BOUNDARY, self.boundary_key(boundary.instant_ms), None, boundary)

    def boundary_instants(self) -> list[int]:
        """Every instant with a recorded boundary, sorted. One listing (one key per
        instant): run when a boundary is resolved or an interval first planned, never per read."""
        return sorted(int(name) for key in self.storage.list(f"{self.base}/boundaries")
                      if (name := key.rsplit("/", 1)[-1].removesuffix(".json")).isdigit())

    def boundary_after(self, instant_ms: int) -> Boundary | None:
        """The nearest boundary recorded after ``instant_ms``, or None."""
        later = [t for t in self.boundary_instants() if t > instant_ms]
        return self.read_boundary(later[0]) if later else None

    def boundaries_around(self, start_ms: int, end_ms: int) -> list[Boundary]:
        """The recorded boundaries from the nearest one before ``start_ms`` to the
        nearest one after ``end_ms``, in time order."""
        instants = self.boundary_instants()
        before = [t for t in instants if t < start_ms][-1:]
        after = [t for t in instants if t > end_ms][:1]
        inside = [t for t in instants if start_ms <= t <= end_ms]
        return [b for t in [*before, *inside, *after] if (b := self.read_boundary(t)) is not None]

    # -- interval pipelines: each interval's batches -----------------------------------
    def interval_key(self, interval: Interval, index: int) -> str:
        return f"{self.base}/intervals/{interval.key}/{index:04d}.json"

    def read_interval_batch(self, interval: Interval, index: int) -> IntervalBatch | None:
        return self._read(Kind.INTERVAL_BATCH, self.interval_key(interval, index), None)

    def planned_intervals(self) -> set[Interval]:
        """Every interval that has had a batch. One listing of the interval index
        (one key per batch): when an interval is first planned or a commit walks
        the committed prefix, never per read."""
        found = set()
        for key in self.storage.list(f"{self.base}/intervals"):
            start, _, end = key.split("/")[-2].partition("-")
            if start.isdigit() and end.isdigit():
                found.add(Interval(int(start), int(end)))
        return found

    def latest_interval_index(self, interval: Interval) -> int:
        """How many batches interval ``interval`` has had (0: none)."""
        return self._probe_end(lambda n: self.storage.read(self.interval_key(interval, n)) is not None, 0)

    def create_interval_batch(self, record: IntervalBatch) -> tuple[bool, IntervalBatch]:
        return self._create(Kind.INTERVAL_BATCH, self.interval_key(record.interval, record.index), record.batch_seq, record)

    @property
    def prefix_key(self) -> str:
        return f"{self.base}/_prefix.json"

    def read_prefix_hint(self) -> PrefixHint | None:
        try:
            return self._read(Kind.PREFIX_HINT, self.prefix_key, None)
        except LedgerCorruptError:
            return None  # only a hint, like the head

    def write_prefix_hint(self, batch_seq: int, end_ms: int) -> None:
        faults.fault_point("ledger.prefix_hint.before_write")
        self.storage.overwrite(self.prefix_key, encode(Kind.PREFIX_HINT, PrefixHint(batch_seq, end_ms)))
        faults.fault_point("ledger.prefix_hint.after_write")
