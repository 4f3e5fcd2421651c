"""Frozen zombies: when each is let go, and when what it did counts as injected."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace

import psutil

from onceflow.core.batch_id import BatchId
from onceflow.core.plan import TXN_ID_POOL
from onceflow.core.states import BatchState
from onceflow_devkit.chaos import zombies


@dataclass
class _Status:
    batch_seq: int
    state: BatchState = BatchState.PLANNED
    attempt: int = 1
    votes: dict = field(default_factory=dict)
    decision: object | None = None

    @property
    def batch_id(self) -> str:
        return str(BatchId(self.batch_seq))


class _Coordinator:
    def __init__(self, *statuses: _Status):
        self.statuses = {s.batch_seq: s for s in statuses}

    def latest_seq(self) -> int:
        return max(self.statuses, default=0)

    def describe(self, seq: int) -> _Status:
        return self.statuses[seq]


def _zombie(**changes) -> zombies.Zombie:
    return zombies.Zombie(3, 3, 1, "clicks_enriched", psutil.Process(os.getpid()), [], **changes)


def _pen(*statuses: _Status) -> zombies.ZombiePen:
    return zombies.ZombiePen(SimpleNamespace(coordinator=_Coordinator(*statuses)))


def test_a_zombie_meets_the_batch_that_holds_its_pooled_ids_next():
    assert _zombie().meets == 3 + TXN_ID_POOL


def test_a_zombie_is_let_go_once_the_batch_holding_its_ids_pre_committed_its_output_before_the_decision():
    held = 3 + TXN_ID_POOL
    assert _pen(_Status(held - 1))._meeting(_zombie()) is None  # not planned yet
    assert _pen(_Status(held))._meeting(_zombie()) is None  # planned, nothing voted
    assert _pen(_Status(held, votes={"page_minute_table": 1}))._meeting(_zombie()) is None  # not its output yet
    met, in_flight = _pen(_Status(held, BatchState.PREPARING, 2, {"clicks_enriched": 1}))._meeting(_zombie())
    assert in_flight and f"batch {BatchId(held)} (attempt 2) had pre-committed clicks_enriched" in met
    decided = _Status(held, BatchState.COMMITTING, votes={"clicks_enriched": 1}, decision=object())
    assert _pen(decided)._meeting(_zombie()) is None


def test_a_zombie_whose_batch_finished_unmet_is_let_go_meeting_no_one():
    met, in_flight = _pen(_Status(3 + TXN_ID_POOL, BatchState.ABORTED))._meeting(_zombie())
    assert not in_flight and "had already aborted" in met


def test_only_a_zombie_that_opened_a_transaction_while_its_ids_were_held_counts_as_injected():
    held = _Coordinator(_Status(3 + TXN_ID_POOL, BatchState.ABORTED, 1))
    split = "split-00000-attempt-1-0.arrow"
    met = _zombie(resumed_at=1.0, met="batch ... had pre-committed", in_flight=True, opened=[split], exited_s=4.2)
    injection = zombies.outcome(met, held)
    assert injection.injected and injection.counts == {"zombie_transactions": 1}
    assert split in injection.what and "ended aborted after 1 attempt(s)" in injection.what

    assert not zombies.outcome(_zombie(), held).injected  # never let go
    assert not zombies.outcome(_zombie(resumed_at=1.0, in_flight=True, opened=[]), held).injected  # opened nothing
    assert not zombies.outcome(_zombie(resumed_at=1.0, in_flight=False, opened=[split]), held).injected  # met no one
