"""What a commit and an abort answer for one split, by what a read of its data shows (pure tables).

``COMMIT_ANSWERS``: a split's state (``split_state.SplitState``) by when, in
the commit, its data was read (``Read``) -> what the commit does and reports
(``CommitAnswer``); ``commit.answer_for`` executes it. ``ABORT_LEFT``: a
split's state once every id of the plan is fenced, by whether the broker
profile hides aborted records -> what the abort reports (``Left``);
``abort.left`` executes it. docs/brokers.md gives both tables in prose.
"""

from __future__ import annotations

import enum
from typing import Sequence

from onceflow.config.broker_profiles import BrokerProfile
from onceflow.core.participant import Outcome, Result
from onceflow.sinks.kafka.split_state import SplitState, SplitView


class Read(enum.Enum):
    """When, in a commit, a split's data was read: the commit reports what the read shows (``COMMIT_ANSWERS``)."""

    BEFORE_END_TXN = "read back, not open"            # a read showed it ended already: no EndTxn was sent
    AFTER_END_TXN = "read back, after EndTxn"         # a read showed it open; this commit's EndTxn was accepted
    DESCRIBED = "described, not ended here"           # its coordinator did not say Ongoing: no EndTxn was sent
    DESCRIBED_ENDED_HERE = "described, ended here"    # its coordinator said Ongoing; this commit's EndTxn was accepted


class CommitAnswer(enum.Enum):
    """What a split's commit does and reports."""

    COMMITTED = "committed"        # DONE: visible, ended by this commit
    ALREADY = "already"            # ALREADY_DONE: visible (or repaired) before this commit ended anything
    REPAIR = "repair"              # the broker aborted it: publish its staged copy once, under the repair id
    STILL_OPEN = "still open"      # RETRY_LATER while a broker timeout can still end it, then FAILED
    UNREADABLE = "unreadable"      # RETRY_LATER: the read did not reach the split's end in time
    INCONSISTENT = "inconsistent"  # FAILED: partly visible; a human must look before anything is re-run


# The broker profile chooses the columns: where it ``describes_transactions`` (Apache Kafka) the
# coordinator's state decides which splits get an EndTxn, and a split it reports CompleteCommit while a
# read shows it open is hanging (its markers are written first: ``hanging.finish_hanging``); elsewhere a
# read decides (``commit.COMMIT_STRATEGIES``).
_READS = (Read.BEFORE_END_TXN, Read.AFTER_END_TXN, Read.DESCRIBED, Read.DESCRIBED_ENDED_HERE)
COMMIT_ANSWERS: dict[tuple[SplitState, Read], CommitAnswer] = {
    (state, read): CommitAnswer[answer]
    for state, row in {
        #                         read back:                     described:
        #                         not open       after EndTxn    not ended      ended here
        SplitState.COMMITTED:     ("ALREADY",    "COMMITTED",    "ALREADY",     "COMMITTED"),
        SplitState.REPAIRED:      ("ALREADY",    "INCONSISTENT", "ALREADY",     "ALREADY"),
        SplitState.ABORTED:       ("REPAIR",     "REPAIR",       "REPAIR",      "REPAIR"),
        SplitState.HELD_BACK:     ("REPAIR",     "REPAIR",       "REPAIR",      "REPAIR"),  # the repair's fence decides
        SplitState.OPEN:          ("STILL_OPEN", "STILL_OPEN",   "STILL_OPEN",  "STILL_OPEN"),
        SplitState.UNKNOWN:       ("UNREADABLE", "UNREADABLE",   "UNREADABLE",  "UNREADABLE"),
        SplitState.INCONSISTENT:  ("INCONSISTENT", "INCONSISTENT", "INCONSISTENT", "INCONSISTENT"),
    }.items()
    for read, answer in zip(_READS, row)
}


class Left(enum.Enum):
    """What an abort reports for a split, by what a read shows once every id of the plan is fenced."""

    ABORTED = "aborted"                  # DONE: nothing of it is visible
    NOT_ENDED = "not ended"              # RETRY_LATER: still open, or the read did not reach its end
    SHOWN = "shown"                      # DONE: visible, as every aborted record is on this broker
    COMMITTED_OUTSIDE = "committed outside the protocol"  # FAILED: the batch stays ABORTING


# Where the broker profile hides aborted records (Apache Kafka), a visible record of an aborted batch was
# committed without a COMMIT decision (I2, I4) and its replay would write it again: the abort fails.
# Where it does not (Tansu), every aborted record stays visible.
ABORT_LEFT: dict[tuple[SplitState, bool], Left] = {
    (state, hides_aborted): Left[left]
    for state, row in {
        #                         hides aborted         shows aborted
        SplitState.ABORTED:       ("ABORTED",           "ABORTED"),
        SplitState.HELD_BACK:     ("NOT_ENDED",         "NOT_ENDED"),
        SplitState.OPEN:          ("NOT_ENDED",         "NOT_ENDED"),
        SplitState.UNKNOWN:       ("NOT_ENDED",         "NOT_ENDED"),
        SplitState.COMMITTED:     ("COMMITTED_OUTSIDE", "SHOWN"),
        SplitState.REPAIRED:      ("COMMITTED_OUTSIDE", "SHOWN"),
        SplitState.INCONSISTENT:  ("COMMITTED_OUTSIDE", "SHOWN"),
    }.items()
    for hides_aborted, left in zip((True, False), row)
}


def left_after_abort(state: SplitState, broker: BrokerProfile) -> Left:
    return ABORT_LEFT[state, broker.hides_aborted]


# The worst outcome first: what a call answers for several splits.
_WORST_FIRST = (Outcome.FAILED, Outcome.RETRY_LATER, Outcome.DONE, Outcome.ALREADY_DONE)


def worst(results: Sequence[Result]) -> Result:
    """The worst outcome among ``results``, with the details of every split that had it."""
    for outcome in _WORST_FIRST:
        details = [r.detail for r in results if r.outcome is outcome]
        if details:
            return Result(outcome, "; ".join(d for d in details if d))
    return Result(Outcome.ALREADY_DONE, "nothing to commit")


def unreadable(where: str, view: SplitView, timeout_s: float) -> Result:
    return Result(
        Outcome.RETRY_LATER,
        f"{where}: could not read the output to its end within {timeout_s:.0f}s ({view.describe()}); "
        "commit again once the broker answers",
    )


def inconsistent(where: str, view: SplitView) -> Result:
    return Result(
        Outcome.FAILED,
        f"{where}: output is partly visible ({view.describe()}); not reporting success. Inspect the topic "
        "before re-running",
    )
