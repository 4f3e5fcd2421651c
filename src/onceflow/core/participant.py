"""The participant contract, as the coordinator sees it: one output system taking part in a batch.

A participant is the commit side of one sink of a pipeline (a Parquet file
sink, a Kafka topic sink); a sink author implements it through
``onceflow.sinks.api``, which also holds the Spark side. The coordinator
drives it through this call sequence::

    plan written (ledger)
      the kind's pre_commit, its data source's commit -> record_vote(vote)
                               Spark driver/executors, then a Python worker
      [vote recorded in ledger]
      verify(vote)             -> Result      Airflow worker, before deciding
    decision written (ledger)
      commit(vote)             -> Result      Airflow worker, commit task or
                                              any later run's recovery
      abort(plan, votes)       -> Result      Airflow worker, rollback task or
                                              recovery (presumed abort)
    batch COMMITTED
      after_commit(plan)                      Airflow worker: commit task,
                                              rollback that finished a commit,
                                              the next plan task

Idempotency is part of the contract: ``commit`` and ``abort`` may be called
any number of times, from any process, after any crash, and must converge to
the same end state. A second ``commit`` of an already committed vote returns
``ALREADY_DONE``, never an error and never a second copy of the data.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from onceflow.core.plan import Plan


class Outcome(enum.Enum):
    """What a commit/abort/verify call achieved (after Flink's CommitRequest)."""

    DONE = "done"                  # the effect was applied by this call
    ALREADY_DONE = "already_done"  # it had been applied before: nothing to do
    RETRY_LATER = "retry_later"    # transient (service unreachable): call again
    FAILED = "failed"              # cannot be applied; a human must look (I7)


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in (Outcome.DONE, Outcome.ALREADY_DONE)


@dataclass(frozen=True)
class Vote:
    """What one participant pre-committed for one attempt of one batch.

    ``payload`` is participant-specific and JSON-serialisable: staged files
    with sizes, row counts and checksums for a file sink; transaction handles
    (transactional.id, producer id, epoch, first-write time) for a Kafka sink.
    """

    participant: str
    batch_seq: int
    attempt: int
    payload: Mapping[str, Any] = field(default_factory=dict)
    records: int = 0
    # Records the output cannot take (a Kafka topic's size limit): kept aside, published with the batch.
    withheld: int = 0
    # A reprocessed interval: the committed batch whose output this vote's commit removes or
    # overwrites. The coordinator commits it only as the plan's justified replacement.
    replaces: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "participant": self.participant,
            "batch_seq": self.batch_seq,
            "attempt": self.attempt,
            "payload": dict(self.payload),
            "records": self.records,
            **({"withheld": self.withheld} if self.withheld else {}),
            **({"replaces": self.replaces} if self.replaces is not None else {}),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Vote":
        return cls(
            participant=str(raw["participant"]),
            batch_seq=int(raw["batch_seq"]),
            attempt=int(raw["attempt"]),
            payload=dict(raw.get("payload", {})),
            records=int(raw.get("records", 0)),
            withheld=int(raw.get("withheld", 0)),
            # Votes of ledger format 1 kept it in the file and Iceberg kinds' payloads.
            replaces=_batch_seq(raw.get("replaces", dict(raw.get("payload", {})).pop("replaces", None))),
        )


def _batch_seq(value: Any) -> int | None:
    return None if value is None else int(value)


@runtime_checkable
class Participant(Protocol):
    """One output of a pipeline. ``name`` is unique within the pipeline. Subclass it to inherit the
    optional steps' defaults (``after_commit``: nothing to do)."""

    name: str

    def verify(self, vote: Vote) -> Result:
        """Can this vote still be committed? Checked before the COMMIT
        decision; FAILED means the batch must be aborted and re-run."""

    def commit(self, vote: Vote) -> Result:
        """Make the vote's output visible. Idempotent."""

    def abort(self, plan: "Plan", votes: Sequence[Vote]) -> Result:
        """Undo everything the plan could have produced, including output of
        attempts that never voted (fence by derived id, delete staging).
        Idempotent."""

    def after_commit(self, plan: "Plan") -> None:
        """Optional: once the batch is COMMITTED, drop what only a commit could need (staged copies
        kept for a repair). Idempotent; a failure here is logged, and the batch stays committed."""
        return None
