"""When an output of guarantee ``none`` must not be written: never twice for the same records
(pure logic over the ledger's statuses)."""

from __future__ import annotations

import types

from onceflow.core.plan import OffsetRange
from onceflow.core.states import BatchState
from onceflow.spark.batch_job import written_already


def plan(seq: int, start: int, end: int, replay_of: int | None = None):
    return types.SimpleNamespace(batch_seq=seq, ranges=(OffsetRange("in", 0, start, end),), replay_of=replay_of,
                                 replaces=None)


class Ledger:
    def __init__(self, *batches):
        self.batches = {p.batch_seq: (p, state) for p, state in batches}

    def describe(self, seq):
        p, state = self.batches[seq]
        return types.SimpleNamespace(plan=p, state=state, batch_id=f"{seq:010d}")


def test_a_first_attempt_of_a_batch_after_committed_ones_writes():
    ledger = Ledger((plan(1, 0, 100), BatchState.COMMITTED))
    assert written_already(ledger, plan(2, 100, 200), attempt=1) is None


def test_a_retried_attempt_and_a_replay_do_not():
    ledger = Ledger((plan(1, 0, 100), BatchState.ABORTED))
    assert "attempt 1" in written_already(ledger, plan(1, 0, 100), attempt=2)
    assert "replays batch 0000000001, aborted" in written_already(ledger, plan(2, 0, 100, replay_of=1), attempt=1)


def test_the_batch_after_a_shortened_replay_does_not_write_the_rest_of_the_aborted_batch():
    # batch 1 wrote [0, 100) and aborted; batch 2 replayed only [0, 50) (a split); batch 3 reads [50, 100)
    ledger = Ledger((plan(1, 0, 100), BatchState.ABORTED), (plan(2, 0, 50, replay_of=1), BatchState.COMMITTED))
    assert "overlaps batch 0000000001, aborted" in written_already(ledger, plan(3, 50, 100), attempt=1)
    # once past the aborted batch's end, batches write again
    ledger.batches[3] = (plan(3, 50, 100), BatchState.COMMITTED)
    assert written_already(ledger, plan(4, 100, 150), attempt=1) is None
