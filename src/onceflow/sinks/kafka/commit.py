"""Committing a vote's open transactions, proven by reading: one strategy per kind of broker profile.

Runs on an Airflow worker (commit task, recovery). EndTxn goes to every open
transaction before anything waits: on a broker whose last stable offset
waits for every open transaction of a partition (Tansu), a split's commit
only becomes visible once its neighbours' are committed too. One scan then
proves every split visible, and ``answers.COMMIT_ANSWERS`` says what each
split's commit reports for what it shows (``answer_for``). What stands
before EndTxn comes from (``COMMIT_STRATEGIES``, by the profile's
``describes_transactions``):

- ``commit_described``: each split's coordinator (one DescribeTransactions
  per coordinator); a split's id that another task attempt holds open is
  fenced first (``loser_holds``); a commit waits while a coordinator says
  PrepareCommit. CompleteCommit is not proof (Apache Kafka reports it for a
  transaction whose marker it could not write: ``hanging``).
- ``commit_read_back``: a scan of the data.

Idempotency: a commit asks the coordinator or looks at the data before
acting, so a retried commit of a committed (or repaired) split returns
ALREADY_DONE and never writes a second copy.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

from onceflow.core.batch_id import BatchId
from onceflow.core.participant import Outcome, Result
from onceflow.sinks.kafka.ids import own_ids
from onceflow.sinks.kafka.answers import COMMIT_ANSWERS, CommitAnswer, Read, inconsistent, unreadable
from onceflow.sinks.kafka.broker_answers import Action
from onceflow.sinks.kafka.coordinators import (
    CoordinatorView, CoordinatorViews, TransactionState, describe_transactions, recorded_state)
from onceflow.sinks.kafka.fencing import FencingError, fence_transactional_ids
from onceflow.sinks.kafka.handle import TxnHandle
from onceflow.sinks.kafka.hanging import finish_hanging
from onceflow.sinks.kafka.hidden_repairs import confirm_aborted
from onceflow.sinks.kafka.output import KafkaOutput
from onceflow.sinks.kafka.repair import repair
from onceflow.sinks.kafka.split_state import SplitState, SplitView
from onceflow.sinks.kafka.txn_protocol import EndTxnReply
from onceflow.sinks.kafka.visibility import Observer

# How long a commit its coordinator reports complete reads for its records before it looks for why they are not visible.
READ_AFTER_COMPLETE_S = 10.0
# A transaction still open this many timeouts after its first write will not end by itself: Apache Kafka
# aborts it within one timeout and a cleanup interval (10 s), a broker that never times out never will.
OVERDUE_TIMEOUTS = 2

# A strategy commits the handles, calling ``ended()`` once every EndTxn is sent (the participant's fault point).
CommitStrategy = Callable[[KafkaOutput, Observer, list[TxnHandle], Callable[[], None]], list[Result]]


def answer_for(output: KafkaOutput, obs: Observer, h: TxnHandle, view: SplitView, read: Read, cause: str,
               said: str = "") -> Result:
    """What the split's commit reports, as ``COMMIT_ANSWERS`` says for what ``view`` shows when it was
    ``read``; ``cause`` is why it was read, ``said`` what ended it (EndTxn's or its coordinator's answer)."""
    where = h.where()
    answer = COMMIT_ANSWERS[view.state, read]
    if answer is CommitAnswer.COMMITTED:
        return Result(Outcome.DONE, f"{where}: committed ({said}), {h.records} records visible")
    if answer is CommitAnswer.ALREADY:
        return Result(Outcome.ALREADY_DONE, f"{where}: {view.state.value}")
    if answer is CommitAnswer.REPAIR:
        return repair(output, obs, h)
    if answer is CommitAnswer.STILL_OPEN:
        return still_open(output, h, cause, view)
    if answer is CommitAnswer.UNREADABLE:
        return unreadable(where, view, output.timeout_s)
    return inconsistent(where, view)


def still_open(output: KafkaOutput, h: TxnHandle, cause: str, after: SplitView) -> Result:
    where, age_ms = h.where(), int(time.time() * 1000) - h.first_write_ms
    if age_ms > OVERDUE_TIMEOUTS * output.transaction_timeout_ms:
        return Result(
            Outcome.FAILED,
            f"{where}: {cause} but the transaction is still open ({after.describe()}) "
            f"{age_ms // 1000} s after its first write, over {OVERDUE_TIMEOUTS}x its transaction.timeout.ms "
            f"({output.transaction_timeout_ms}): this broker does not time transactions out, so waiting will not "
            "end it. Find what holds the partition's last stable offset (docs/brokers.md), end that transaction "
            "on the broker, then re-run the commit task (an aborted split is repaired from its staged copy)",
        )
    return Result(
        Outcome.RETRY_LATER,
        f"{where}: {cause} but the transaction is still open ({after.describe()}): "
        "the broker did not act on the recorded handle, or another open transaction holds the partition's "
        "last stable offset back; commit again later (a broker timeout makes it repairable)",
    )


def end_txn_refused(h: TxnHandle, reply: EndTxnReply) -> Result:
    if reply.action is Action.RETRY:
        return Result(Outcome.RETRY_LATER, f"{h.where()}: EndTxn(commit) answered {reply}")
    return Result(Outcome.FAILED, f"{h.where()}: EndTxn(commit) answered {reply}; fix the cause and re-run commit")


def _refused(reply: EndTxnReply) -> bool:
    return reply.action in (Action.RETRY, Action.FAIL)


def commit_read_back(output: KafkaOutput, obs: Observer, handles: list[TxnHandle], ended: Callable[[], None]) -> list[Result]:
    """A read of the data says which splits are open: EndTxn(commit) for those, then read until they end."""
    before = confirm_aborted(obs, handles, obs.observe(handles))
    still = [i for i, view in enumerate(before) if view.state is SplitState.OPEN]
    replies = dict(zip(still, output.end_txns([handles[i] for i in still], commit=True)))
    ended()
    accepted = [i for i, reply in replies.items() if not _refused(reply)]
    after = dict(zip(accepted, confirm_aborted(obs, [handles[i] for i in accepted],
                                               obs.observe_until_ended([handles[i] for i in accepted]))))
    results = []
    for i, h in enumerate(handles):
        if before[i].state is not SplitState.OPEN:
            results.append(answer_for(output, obs, h, before[i], Read.BEFORE_END_TXN, "read before EndTxn"))
        elif _refused(replies[i]):
            results.append(end_txn_refused(h, replies[i]))
        else:
            results.append(answer_for(output, obs, h, after[i], Read.AFTER_END_TXN,
                                      f"EndTxn(commit) answered {replies[i]}", replies[i].error_name))
    return results


def commit_described(output: KafkaOutput, obs: Observer, handles: list[TxnHandle], ended: Callable[[], None]) -> list[Result]:
    """Each split's coordinator says where it stands: EndTxn(commit) for the Ongoing ones, wait while
    PrepareCommit, then one read; a split reported CompleteCommit and still open is hanging."""
    ids = [h.transactional_id for h in handles]
    views = describe_transactions(output.config, ids, output.timeout_s)
    losers = [h.transactional_id for h in handles if loser_holds(output, views, h)]
    if losers:
        try:
            fence_transactional_ids(output.config, losers, output.timeout_s)
        except FencingError as exc:
            return [Result(Outcome.RETRY_LATER, str(exc))] * len(handles)
        views = describe_transactions(output.config, ids, output.timeout_s)
    states = [recorded_state(views, h) for h in handles]
    ongoing = [i for i, state in enumerate(states) if state is TransactionState.ONGOING]
    replies = dict(zip(ongoing, output.end_txns([handles[i] for i in ongoing], commit=True)))
    ended()
    results = {i: end_txn_refused(handles[i], r) for i, r in replies.items() if _refused(r)}
    committing = [i for i, state in enumerate(states) if i not in results and (
        state in (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)
        or (i in replies and replies[i].action is Action.DONE))]
    complete = await_complete_commit(output, [handles[i] for i in committing])
    for i in committing:
        h = handles[i]
        if complete.get(h.transactional_id) is TransactionState.PREPARE_COMMIT:
            results[i] = Result(Outcome.RETRY_LATER, f"{h.where()}: EndTxn(commit) was accepted but its coordinator "
                                f"has not written every commit marker within {output.timeout_s:.0f}s (still "
                                "PrepareCommit); commit again later")
    to_read = [i for i in range(len(handles)) if i not in results]
    # CompleteCommit comes after the markers are in the partitions' logs: what is not visible soon is hanging or held
    # back. Any other answer (no description, an EndTxn to verify) is read for as long as the commit may wait.
    all_complete = all(complete.get(handles[i].transactional_id) is TransactionState.COMPLETE_COMMIT for i in to_read)
    quiet_s = min(READ_AFTER_COMPLETE_S, output.timeout_s) if all_complete else None
    read = confirm_aborted(obs, [handles[i] for i in to_read],
                           obs.observe_until_ended([handles[i] for i in to_read], quiet_s=quiet_s))
    hanging: dict[int, SplitView] = {}
    for i, view in zip(to_read, read):
        h = handles[i]
        said = complete.get(h.transactional_id)
        if view.state is SplitState.OPEN and said is TransactionState.COMPLETE_COMMIT:
            hanging[i] = view
        elif i in replies:
            results[i] = answer_for(output, obs, h, view, Read.DESCRIBED_ENDED_HERE,
                                    f"EndTxn(commit) answered {replies[i]}", said.value if said else "?")
        else:
            results[i] = answer_for(output, obs, h, view, Read.DESCRIBED,
                                    f"its coordinator shows {views.get(h.transactional_id, 'nothing')}")
    results.update(finish_hanging(output, obs, [(i, handles[i], view) for i, view in hanging.items()], set(replies)))
    return [results[i] for i in range(len(handles))]


def loser_holds(output: KafkaOutput, views: Mapping[str, CoordinatorView], h: TxnHandle) -> bool:
    """Another task attempt of the split (Spark's retried or speculative copy, a zombie attempt) began a
    transaction on the split's id after the voted one flushed: its init_transactions aborted the voted
    transaction (repaired from the staged copy), and its own holds the split's partitions until the
    broker's timeout. So does a zombie of an earlier batch that shares the pooled id. Only the voted
    epoch may commit, and no batch in flight but this one holds the id (``ids.own_ids``: a later batch
    sharing it is planned only once this one is finished; an older plan's id, shared with the batches
    beside it, is never fenced here): fence it. A later attempt's init_transactions
    keeps the id's producer id and bumps its epoch; a coordinator naming another producer id is no
    later attempt of this vote (a handle the coordinator does not know), and is left to the checks
    that never take "no error" as proof."""
    view = views.get(h.transactional_id)
    return (view is not None and view.state is TransactionState.ONGOING
            and view.producer_id == h.producer_id and view.producer_epoch > h.epoch
            and h.transactional_id in own_ids(output.pipeline, output.name, h.split, int(BatchId.parse(h.batch_id))))


def await_complete_commit(output: KafkaOutput, handles: Sequence[TxnHandle]) -> dict[str, TransactionState | None]:
    """Ask the coordinators until no transaction of ``handles`` is PrepareCommit any more, or
    ``timeout_s`` ran out: each id's last state for the recorded transaction (None: the coordinator
    shows another, or did not answer)."""
    last: dict[str, TransactionState | None] = {}
    waiting = {h.transactional_id: h for h in handles}
    deadline = time.monotonic() + output.timeout_s
    pause = 0.005
    with CoordinatorViews(output.config, output.timeout_s) as coordinators:
        while waiting:
            views = coordinators.describe(list(waiting), max(deadline - time.monotonic(), 0.1))
            for txn_id, h in list(waiting.items()):
                last[txn_id] = recorded_state(views, h)
                if last[txn_id] is not TransactionState.PREPARE_COMMIT:
                    del waiting[txn_id]
            if not waiting or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.25)
    return last


# By the broker profile's ``describes_transactions``: whether its coordinators' answers are trusted.
COMMIT_STRATEGIES: dict[bool, CommitStrategy] = {True: commit_described, False: commit_read_back}
