"""What the coordinator does with a participant's answer: one table, step x outcome.

    step      DONE, ALREADY_DONE         RETRY_LATER                      FAILED
    verify    the vote stands            RetryLater; nothing is decided   the vote is refused: ABORT is decided
    commit    the effect is marked done  RetryLater; COMMIT stands        CommitFailed; the batch stays COMMITTING (I7)
    abort     the effect is marked done  RetryLater; ABORT stands         AbortFailed; the batch stays ABORTING

``Coordinator`` looks every answer up here (``REACTIONS``) and does what the
row says; no other place decides what an outcome means.
"""

from __future__ import annotations

import enum

from onceflow.core.participant import Outcome


class Step(enum.Enum):
    """The coordinator's calls into a participant (``core.participant.Participant``)."""

    VERIFY = "verify"
    COMMIT = "commit"
    ABORT = "abort"


class Reaction(enum.Enum):
    PROCEED = "proceed"        # verify: the vote is valid; commit, abort: the effect's done marker is written
    REFUSE_VOTE = "refuse"     # verify only: the vote is invalid, so the batch is aborted
    RETRY = "retry"            # RetryLater: the task fails and runs again; what the ledger holds stands
    STOP = "stop"              # CommitFailed / AbortFailed: a decision cannot be applied; a human must look


REACTIONS: dict[tuple[Step, Outcome], Reaction] = {
    (Step.VERIFY, Outcome.DONE): Reaction.PROCEED,
    (Step.VERIFY, Outcome.ALREADY_DONE): Reaction.PROCEED,
    (Step.VERIFY, Outcome.RETRY_LATER): Reaction.RETRY,
    (Step.VERIFY, Outcome.FAILED): Reaction.REFUSE_VOTE,
    (Step.COMMIT, Outcome.DONE): Reaction.PROCEED,
    (Step.COMMIT, Outcome.ALREADY_DONE): Reaction.PROCEED,
    (Step.COMMIT, Outcome.RETRY_LATER): Reaction.RETRY,
    (Step.COMMIT, Outcome.FAILED): Reaction.STOP,
    (Step.ABORT, Outcome.DONE): Reaction.PROCEED,
    (Step.ABORT, Outcome.ALREADY_DONE): Reaction.PROCEED,
    (Step.ABORT, Outcome.RETRY_LATER): Reaction.RETRY,
    (Step.ABORT, Outcome.FAILED): Reaction.STOP,
}
