"""The states of a batch and the one table of allowed transitions.

A batch's state is never stored: it is derived from which ledger records
exist (``derive_state``, which ``core.batch_view.BatchRecords`` alone calls), so it
cannot disagree with them::

    PLANNED     plan.json only
    PREPARING   an attempt is claimed; not every sink voted in the latest one
    PREPARED    every sink voted in the latest attempt
    COMMITTING  decision COMMIT, batch done marker absent (redo until done, I3)
    COMMITTED   decision COMMIT and done/_batch.json
    ABORTING    decision ABORT, batch done marker absent
    ABORTED     decision ABORT and done/_batch.json

Recovery (``RECOVERY``, what ``Coordinator.recover`` executes): COMMITTING
is finished by redoing the commit; PLANNED, PREPARING and PREPARED have no
decision and are aborted (presumed abort); ABORTING is finished by redoing
the abort.
"""

from __future__ import annotations

import enum
from typing import Protocol


class BatchState(enum.Enum):
    PLANNED = "planned"
    PREPARING = "preparing"
    PREPARED = "prepared"
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABORTING = "aborting"
    ABORTED = "aborted"

    @property
    def terminal(self) -> bool:
        return self in (BatchState.COMMITTED, BatchState.ABORTED)

    @property
    def decided(self) -> bool:
        return self in (BatchState.COMMITTING, BatchState.COMMITTED, BatchState.ABORTING, BatchState.ABORTED)


S = BatchState
TRANSITIONS: dict[BatchState, frozenset[BatchState]] = {
    # a new attempt may start until a decision exists (a retried Spark job)
    S.PLANNED: frozenset({S.PREPARING, S.ABORTING}),
    S.PREPARING: frozenset({S.PREPARING, S.PREPARED, S.ABORTING}),
    S.PREPARED: frozenset({S.PREPARING, S.COMMITTING, S.ABORTING}),
    S.COMMITTING: frozenset({S.COMMITTED}),
    S.ABORTING: frozenset({S.ABORTED}),
    S.COMMITTED: frozenset(),
    S.ABORTED: frozenset(),
}

class Recovery(enum.Enum):
    """What recovery does to a batch an earlier run left unfinished: the decision it
    writes first (``decides``; None: the recorded one stands), then it applies the
    batch's decision, whichever won."""

    PRESUMED_ABORT = ("presumed abort", "ABORT")  # no decision: nothing of it is visible, so abort it
    REDO_COMMIT = ("redo commit", None)           # COMMIT decided: apply every effect still missing (I3)
    REDO_ABORT = ("redo abort", None)             # ABORT decided: undo every effect still there

    def __init__(self, label: str, decides: str | None):
        self.label = label
        self.decides = decides


# What recovery does from each unfinished state; a finished batch has no entry.
RECOVERY: dict[BatchState, Recovery] = {
    S.PLANNED: Recovery.PRESUMED_ABORT,
    S.PREPARING: Recovery.PRESUMED_ABORT,
    S.PREPARED: Recovery.PRESUMED_ABORT,
    S.COMMITTING: Recovery.REDO_COMMIT,
    S.ABORTING: Recovery.REDO_ABORT,
}


class IllegalTransition(RuntimeError):
    """A step was asked for that the batch's state does not allow."""


def check_transition(
    current: BatchState, target: BatchState, *, batch: str, pipeline: str, step: str,
    refusal: type[IllegalTransition] = IllegalTransition,
) -> None:
    """Every write that changes a batch's state calls this first; ``refusal``
    is the error to raise (a zombie's vote raises ``StaleAttempt``)."""
    if target not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[current])) or "none (finished)"
        raise refusal(
            f"{step} refused for batch {batch} of pipeline {pipeline!r}: it is {current.value}, and from there "
            f"only {allowed} may follow, not {target.value}. Run `onceflow status` to see the batch; "
            "a finished batch is never changed, plan the next one instead."
        )


class Records(Protocol):
    """Which of a batch's records exist, as ``derive_state`` asks for them."""

    @property
    def outcome(self) -> str | None: ...  # the decision: COMMIT, ABORT or None

    @property
    def finished(self) -> bool: ...  # done/_batch.json exists

    @property
    def has_attempt(self) -> bool: ...

    @property
    def all_voted(self) -> bool: ...  # every output voted in the latest attempt


def derive_state(records: Records) -> BatchState:
    """The state implied by which records exist. Asks only what the state depends on: a
    decided batch's attempts and votes are never asked for, so a reader need not read them."""
    outcome = records.outcome
    if outcome == "COMMIT":
        return S.COMMITTED if records.finished else S.COMMITTING
    if outcome == "ABORT":
        return S.ABORTED if records.finished else S.ABORTING
    if not records.has_attempt:
        return S.PLANNED
    return S.PREPARED if records.all_voted else S.PREPARING
