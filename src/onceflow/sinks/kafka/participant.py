"""KafkaSinkParticipant: one Kafka output topic taking part in a batch.

Runs on an Airflow worker (commit task, rollback task, recovery of a later
run). The Spark side produces with ``writer.TransactionalSplitWriter`` and
puts the handles in the vote with ``vote_payload``. Then::

    verify(vote)          before the COMMIT decision: every handle belongs to
                          this sink, its staged copy exists, its transaction
                          is still open and younger than
                          safety_fraction * transaction.timeout.ms
    commit(vote)          where each split stands (its coordinator, or the
                          data); a split's id that another task attempt
                          holds open is fenced first (_loser_holds)
                          -> EndTxn(commit) for the open ones -> wait
                          while a coordinator says PrepareCommit -> read until
                          every split is visible (one scan); repair from the
                          staged copy any split the broker aborted; then
                          publish the records withheld as too large
                          (writer), once, beside the ledger
    abort(plan, votes)    EndTxn(abort) for known handles, then fence every
                          transactional.id the plan allows, read what is
                          left of each voted split (``ABORT_LEFT``), delete
                          staging

Idempotency: ``commit`` asks the coordinator or looks at the data before
acting, so a retried commit of a committed (or repaired) split returns ALREADY_DONE and never writes a
second copy. A repair runs under the split's repair id: initialising it
fences any other repairer and aborts a repair that crashed half-way, and the
data is observed again after that fence, so a repair is published once; a
repair that another open transaction hides from read_committed readers is
looked for past the last stable offset too (``visibility.confirm_aborted``).
``abort`` is EndTxn(abort) + fencing, both repeatable.
"""

from __future__ import annotations

import enum
import hashlib
import time
from typing import Any, Iterable, Mapping, Sequence

from confluent_kafka import KafkaException, Producer
from kafka.errors import KafkaError

from onceflow.core import faults
from onceflow.core.batch_id import BatchId
from onceflow.core.participant import Outcome, Participant, Result, Vote
from onceflow.core.plan import Plan
from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import base_config, principal, producer_config
from onceflow.sinks.kafka.fencing import FencingError, fence_transactional_ids
from onceflow.kafka.ids import is_split_id, repair_id, transactional_id
from onceflow.kafka.produce import produce_waiting
from onceflow.config.broker_profiles import PROFILES, BrokerProfile
from onceflow.sinks.kafka.txn_protocol import (
    Action,
    CoordinatorView,
    CoordinatorViews,
    EndTxnReply,
    TransactionState,
    describe_transactions,
    end_txns,
    open_transactions,
    write_commit_markers,
)
from onceflow.sinks.kafka.visibility import Observer, SplitView, State, confirm_aborted, observe
from onceflow.config.warehouse_layout import kafka_staging_dir, withheld_dir
from onceflow.storage import Storage, storage_for
from onceflow.sinks.kafka.headers import REPAIR
from onceflow.kafka.lifetime import DEFAULT_SAFETY_FRACTION, DEFAULT_TRANSACTION_TIMEOUT_MS
from onceflow.sinks.kafka.writer import TRANSACTION_VERSION, StagedCopyDamaged, TxnHandle, handle_headers, open_staged

# How long a commit its coordinator reports complete reads for its records before it looks for why they are not visible.
SETTLE_AFTER_COMPLETE_S = 10.0
AFTER_END_TXN = faults.declare("kafka.commit.after_end_txn", "Kafka sink commit: EndTxn sent for every split, nothing verified yet")

# A transaction still open this many timeouts after its first write will not end by itself: Apache Kafka
# aborts it within one timeout and a cleanup interval (10 s), a broker that never times out never will.
OVERDUE_TIMEOUTS = 2


class Read(enum.Enum):
    """When, in a commit, a split's data was read: the commit reports what the read shows (``SETTLE``)."""

    BEFORE_END_TXN = "read back, not open"            # a read showed it ended already: no EndTxn was sent
    AFTER_END_TXN = "read back, after EndTxn"         # a read showed it open; this commit's EndTxn was accepted
    DESCRIBED = "described, not ended here"           # its coordinator did not say Ongoing: no EndTxn was sent
    DESCRIBED_ENDED_HERE = "described, ended here"    # its coordinator said Ongoing; this commit's EndTxn was accepted


class Settled(enum.Enum):
    """What a split's commit reports."""

    COMMITTED = "committed"        # DONE: visible, ended by this commit
    ALREADY = "already"            # ALREADY_DONE: visible (or repaired) before this commit ended anything
    REPAIR = "repair"              # the broker aborted it: publish its staged copy once, under the repair id
    STILL_OPEN = "still open"      # RETRY_LATER while a broker timeout can still end it, then FAILED
    UNREADABLE = "unreadable"      # RETRY_LATER: the read did not reach the split's end in time
    INCONSISTENT = "inconsistent"  # FAILED: partly visible; a human must look before anything is re-run


# What a split's commit reports: what a read of its data shows, by when it was read. The broker profile
# chooses the columns: where it ``describes_transactions`` (Apache Kafka) the coordinator's state decides
# which splits get an EndTxn, and a split it reports CompleteCommit while a read shows it open is hanging
# (its markers are written first: ``_finish_hanging``); elsewhere a read decides.
_C, _A, _R, _O, _U, _I = (Settled.COMMITTED, Settled.ALREADY, Settled.REPAIR, Settled.STILL_OPEN, Settled.UNREADABLE,
                          Settled.INCONSISTENT)
_COLUMNS = (Read.BEFORE_END_TXN, Read.AFTER_END_TXN, Read.DESCRIBED, Read.DESCRIBED_ENDED_HERE)
SETTLE: dict[tuple[State, Read], Settled] = {
    (state, read): settled
    for state, row in {
        #                    read back:            described:
        #                    not open  after EndTxn  not ended  ended here
        State.COMMITTED:     (_A,      _C,           _A,        _C),
        State.REPAIRED:      (_A,      _I,           _A,        _A),
        State.ABORTED:       (_R,      _R,           _R,        _R),
        State.HELD_BACK:     (_R,      _R,           _R,        _R),  # the repair's fence decides: ``_repair``
        State.OPEN:          (_O,      _O,           _O,        _O),
        State.UNKNOWN:       (_U,      _U,           _U,        _U),
        State.INCONSISTENT:  (_I,      _I,           _I,        _I),
    }.items()
    for read, settled in zip(_COLUMNS, row)
}


class Left(enum.Enum):
    """What an abort reports for a split, by what a read shows once every id of the plan is fenced."""

    ABORTED = "aborted"                  # DONE: nothing of it is visible
    NOT_ENDED = "not ended"              # RETRY_LATER: still open, or the read did not reach its end
    SHOWN = "shown"                      # DONE: visible, as every aborted record is on this broker
    COMMITTED_OUTSIDE = "committed outside the protocol"  # FAILED: the batch stays ABORTING


# What an abort reports for a split: what a read shows after fencing, by whether the broker profile hides
# aborted records. Where it does (Apache Kafka), a visible record of an aborted batch was committed without
# a COMMIT decision (I2, I4) and its replay would write it again: the abort fails. Where it does not
# (Tansu), every aborted record stays visible.
_AB, _NE, _SH, _CO = Left.ABORTED, Left.NOT_ENDED, Left.SHOWN, Left.COMMITTED_OUTSIDE
ABORT_LEFT: dict[tuple[State, bool], Left] = {
    (state, hides_aborted): left
    for state, row in {
        #                    hides aborted  shows aborted
        State.ABORTED:       (_AB,          _AB),
        State.HELD_BACK:     (_NE,          _NE),
        State.OPEN:          (_NE,          _NE),
        State.UNKNOWN:       (_NE,          _NE),
        State.COMMITTED:     (_CO,          _SH),
        State.REPAIRED:      (_CO,          _SH),
        State.INCONSISTENT:  (_CO,          _SH),
    }.items()
    for hides_aborted, left in zip((True, False), row)
}


def left_after_abort(state: State, broker: BrokerProfile) -> Left:
    return ABORT_LEFT[state, broker.hides_aborted]


def vote_payload(handles: Iterable[TxnHandle]) -> dict[str, Any]:
    """The Kafka sink's vote payload (JSON-serialisable)."""
    return {"handles": [h.to_dict() for h in handles]}


def withheld_file(warehouse: str, h: TxnHandle) -> str:
    """Where a committed split's withheld records are published (one file per split)."""
    return f"{withheld_dir(warehouse, h.pipeline, h.sink, h.batch_id)}/split-{h.split:05d}.parquet"


def handles_of(vote: Vote) -> list[TxnHandle]:
    return [TxnHandle.from_dict(raw) for raw in vote.payload.get("handles", ())]


def _where(h: TxnHandle) -> str:
    return f"batch {h.batch_id} split {h.split} ({h.transactional_id}) on {h.topic}"


def _recorded_state(views: Mapping[str, CoordinatorView], h: TxnHandle) -> TransactionState | None:
    """The coordinator's state of the transaction the handle recorded; None if it shows another (a newer
    epoch: aborted by a timeout, fenced) or nothing."""
    view = views.get(h.transactional_id)
    return view.state if view is not None and view.is_of(h.producer_id, h.epoch) else None


def _end_txn_refused(where: str, reply: EndTxnReply) -> Result:
    if reply.action is Action.RETRY:
        return Result(Outcome.RETRY_LATER, f"{where}: EndTxn(commit) answered {reply}")
    return Result(Outcome.FAILED, f"{where}: EndTxn(commit) answered {reply}; fix the cause and re-run commit")


def _identity(h: TxnHandle) -> tuple[str, int, int, int]:
    return h.transactional_id, h.producer_id, h.epoch, h.transaction_version or TRANSACTION_VERSION


def _worst(results: Sequence[Result]) -> Result:
    order = [Outcome.FAILED, Outcome.RETRY_LATER, Outcome.DONE, Outcome.ALREADY_DONE]
    for outcome in order:
        details = [r.detail for r in results if r.outcome is outcome]
        if details:
            return Result(outcome, "; ".join(d for d in details if d))
    return Result(Outcome.ALREADY_DONE, "nothing to commit")


class KafkaSinkParticipant(Participant):
    """The Participant for one Kafka output topic of a pipeline."""

    def __init__(
        self,
        name: str,
        pipeline: str,
        config: Mapping[str, Any],
        staging_root: str,
        storage: Storage | None = None,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        safety_fraction: float = DEFAULT_SAFETY_FRACTION,
        timeout_s: float = 30.0,
        broker: BrokerProfile = PROFILES["apache"],
    ):
        if not 0 < safety_fraction < 1:
            raise ValueError(f"safety_fraction must be between 0 and 1 (exclusive), got {safety_fraction}")
        self.name = name
        self.pipeline = pipeline
        self.config = base_config(config)
        self.staging_root = staging_root
        self.storage = storage or storage_for(staging_root)
        self.transaction_timeout_ms = transaction_timeout_ms
        self.safety_fraction = safety_fraction
        self.timeout_s = timeout_s
        self.broker = broker

    @property
    def max_vote_age_ms(self) -> int:
        return int(self.transaction_timeout_ms * self.safety_fraction)

    # -- verify ---------------------------------------------------------------------

    def verify(self, vote: Vote) -> Result:
        """Before the decision: can every handle of this vote still be committed?"""
        problems = []
        now_ms = int(time.time() * 1000)
        to_observe = []
        for h in handles_of(vote):
            where = _where(h)
            if (h.pipeline, h.sink) != (self.pipeline, self.name) or not is_split_id(h.transactional_id, h.pipeline, h.sink, h.split, vote.batch_seq):
                problems.append(f"{where}: handle does not belong to sink {self.name} of {self.pipeline}")
                continue
            if h.withheld and self.storage.size(h.withheld_uri) is None:
                problems.append(f"{where}: the file of its {h.withheld} withheld records {h.withheld_uri} is missing")
                continue
            if not h.partitions or not h.transactional:
                continue  # nothing written, or written visibly by the job (a weaker guarantee): nothing to keep open
            age = now_ms - h.first_write_ms
            if age > self.max_vote_age_ms:
                problems.append(
                    f"{where}: transaction is {age} ms old, over {self.safety_fraction} of transaction.timeout.ms "
                    f"({self.transaction_timeout_ms}); abort and re-run the batch (offsets did not move, nothing is lost)"
                )
                continue
            if not self._staged_exists(h):
                problems.append(f"{where}: staged copy {h.staged_uri} is missing, a broker abort could not be repaired")
                continue
            to_observe.append(h)
        if to_observe and not problems:
            problems += self._not_open(to_observe)
        if problems:
            return Result(Outcome.FAILED, "; ".join(problems))
        return Result(Outcome.DONE, f"{len(to_observe)} transaction(s) open and young enough")

    def _not_open(self, handles: list[TxnHandle]) -> list[str]:
        """A problem for each handle whose transaction is no longer open: as its coordinator reports it
        where the profile trusts that, else as a read_committed reader sees it."""
        if self.broker.describes_transactions:
            views = describe_transactions(self.config, [h.transactional_id for h in handles], self.timeout_s)
            return [
                f"{_where(h)}: transaction is no longer open ({views.get(h.transactional_id, 'no answer from its coordinator')})"
                for h in handles
                if _recorded_state(views, h) is not TransactionState.ONGOING
            ]
        with Observer(self.config, self.timeout_s) as obs:
            views = obs.observe(handles)
        return [
            f"{_where(h)}: transaction is no longer open ({view.state.value}: {view.describe()})"
            for h, view in zip(handles, views)
            if view.state is not State.OPEN
        ]

    # -- commit ---------------------------------------------------------------------

    def commit(self, vote: Vote) -> Result:
        """Commit every handle of the vote, proven by reading; repair if the broker aborted one.

        What stands before EndTxn comes from each split's coordinator where the
        broker profile ``describes_transactions`` (one DescribeTransactions per
        coordinator), else from a scan of the data. EndTxn goes to every open
        transaction before anything waits: on a broker whose last stable
        offset waits for every open transaction of a partition (Tansu), a
        split's commit only becomes visible once its neighbours' are
        committed too. A commit then waits for the coordinator to leave
        PrepareCommit, and one scan proves every split visible: CompleteCommit
        is not proof (Apache Kafka reports it for a transaction whose marker
        it could not write: docs/brokers.md, "Hanging transactions").
        """
        voted = handles_of(vote)
        handles = [h for h in voted if h.partitions and h.transactional]
        results = []
        if handles:
            with Observer(self.config, self.timeout_s) as obs:
                if self.broker.describes_transactions:
                    results = self._commit_described(obs, handles)
                else:
                    results = self._commit_read_back(obs, handles)
        direct = [h for h in voted if not h.transactional]
        if direct:
            results.append(Result(Outcome.ALREADY_DONE, f"{sum(h.records for h in direct)} record(s) written visibly by "
                                  f"the job ({direct[0].guarantee}: no transaction to end)"))
        if all(r.ok for r in results):  # the batch's records are in the topic: now the ones it could not take
            results += [self._publish_withheld(h) for h in voted if h.withheld]
        return _worst(results) if results else Result(Outcome.ALREADY_DONE, "wrote nothing")

    def _commit_read_back(self, obs: Observer, handles: list[TxnHandle]) -> list[Result]:
        before = confirm_aborted(obs, handles, obs.observe(handles))
        still_open = [i for i, view in enumerate(before) if view.state is State.OPEN]
        replies = dict(zip(still_open, self._end_txns([handles[i] for i in still_open], commit=True)))
        faults.fault_point(AFTER_END_TXN)
        ended = [i for i, reply in replies.items() if reply.action not in (Action.RETRY, Action.FAIL)]
        after = dict(zip(ended, confirm_aborted(obs, [handles[i] for i in ended], obs.settle([handles[i] for i in ended]))))
        return [self._settle_read_back(obs, h, before[i], replies.get(i), after.get(i)) for i, h in enumerate(handles)]

    def _commit_described(self, obs: Observer, handles: list[TxnHandle]) -> list[Result]:
        ids = [h.transactional_id for h in handles]
        views = describe_transactions(self.config, ids, self.timeout_s)
        losers = [h.transactional_id for h in handles if self._loser_holds(views, h)]
        if losers:
            try:
                fence_transactional_ids(self.config, losers, self.timeout_s)
            except FencingError as exc:
                return [Result(Outcome.RETRY_LATER, str(exc))] * len(handles)
            views = describe_transactions(self.config, ids, self.timeout_s)
        states = [_recorded_state(views, h) for h in handles]
        ongoing = [i for i, state in enumerate(states) if state is TransactionState.ONGOING]
        replies = dict(zip(ongoing, self._end_txns([handles[i] for i in ongoing], commit=True)))
        faults.fault_point(AFTER_END_TXN)
        results = {i: _end_txn_refused(_where(handles[i]), r) for i, r in replies.items() if r.action in (Action.RETRY, Action.FAIL)}
        committing = [i for i, state in enumerate(states) if i not in results and (
            state in (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)
            or (i in replies and replies[i].action is Action.DONE))]
        complete = self._await_complete_commit([handles[i] for i in committing])
        for i in committing:
            h = handles[i]
            if complete.get(h.transactional_id) is TransactionState.PREPARE_COMMIT:
                results[i] = Result(Outcome.RETRY_LATER, f"{_where(h)}: EndTxn(commit) was accepted but its coordinator "
                                    f"has not written every commit marker within {self.timeout_s:.0f}s (still "
                                    "PrepareCommit); commit again later")
        to_read = [i for i in range(len(handles)) if i not in results]
        # CompleteCommit comes after the markers are in the partitions' logs: what is not visible soon is hanging or held
        # back. Any other answer (no description, an EndTxn to verify) is read for as long as the commit may wait.
        all_complete = all(complete.get(handles[i].transactional_id) is TransactionState.COMPLETE_COMMIT for i in to_read)
        quiet_s = min(SETTLE_AFTER_COMPLETE_S, self.timeout_s) if all_complete else None
        settled = obs.settle([handles[i] for i in to_read], quiet_s=quiet_s)
        read = confirm_aborted(obs, [handles[i] for i in to_read], settled)
        hanging: dict[int, SplitView] = {}
        for i, view in zip(to_read, read):
            h = handles[i]
            said = complete.get(h.transactional_id)
            if view.state is State.OPEN and said is TransactionState.COMPLETE_COMMIT:
                hanging[i] = view
            elif i in replies:
                results[i] = self._settle(obs, h, view, Read.DESCRIBED_ENDED_HERE,
                                          f"EndTxn(commit) answered {replies[i]}", said.value if said else "?")
            else:
                results[i] = self._settle(obs, h, view, Read.DESCRIBED,
                                          f"its coordinator shows {views.get(h.transactional_id, 'nothing')}")
        results.update(self._finish_hanging(obs, [(i, handles[i], view) for i, view in hanging.items()], set(replies)))
        return [results[i] for i in range(len(handles))]

    def _loser_holds(self, views: Mapping[str, CoordinatorView], h: TxnHandle) -> bool:
        """Another task attempt of the split (Spark's retried or speculative copy, a zombie attempt) began a
        transaction on the split's id after the voted one flushed: its init_transactions aborted the voted
        transaction (repaired from the staged copy), and its own holds the split's partitions until the
        broker's timeout. Only the voted epoch may commit, and the id is this batch's alone (an older plan's
        id, shared with later batches, is never fenced here): fence it. A later attempt's init_transactions
        keeps the id's producer id and bumps its epoch; a coordinator naming another producer id is no
        later attempt of this vote (a handle the coordinator does not know), and is left to the checks
        that never take "no error" as proof."""
        view = views.get(h.transactional_id)
        return (view is not None and view.state is TransactionState.ONGOING
                and view.producer_id == h.producer_id and view.producer_epoch > h.epoch
                and h.transactional_id == transactional_id(self.pipeline, self.name, h.split, int(BatchId.parse(h.batch_id))))

    def _finish_hanging(self, obs: Observer, hanging: list[tuple[int, TxnHandle, SplitView]],
                        ended_here: set[int]) -> dict[int, Result]:
        """Splits their coordinators report CompleteCommit, yet a partition still holds open: the
        coordinator dropped that partition's marker (its leader died as the transaction ended). Write the
        COMMIT markers they decided on, all of them before looking again: two splits' hanging
        transactions in one partition each hold the other's records back."""
        if not hanging:
            return {}
        handles = [h for _, h, _ in hanging]
        written = [write_commit_markers(self.config, h.topic, [v.partition for v in view.partitions if v.open],
                                        h.producer_id, h.epoch, self.timeout_s) for _, h, view in hanging]
        # Only a marker written now can make them visible soon; held back by another open transaction, a look is enough.
        wait = any(o.written for marked in written for o in marked.values())
        after = confirm_aborted(obs, handles, obs.settle(handles) if wait else obs.observe(handles))
        results = {}
        for (key, h, _), view, marked in zip(hanging, after, written):
            markers = ", ".join(f"p{p}: {o}" for p, o in sorted(marked.items()))
            now = sorted(p for p, o in marked.items() if o.written)
            if view.state is State.COMMITTED:
                if now:
                    results[key] = Result(Outcome.DONE, f"{_where(h)}: committed; its coordinator had reported "
                                          f"CompleteCommit without the commit marker of partition(s) {now}, written "
                                          f"now ({markers}); {h.records} records visible")
                else:  # its markers came, or what held them back ended, while this commit looked
                    results[key] = Result(Outcome.DONE if key in ended_here else Outcome.ALREADY_DONE,
                                          f"{_where(h)}: committed, {h.records} records visible after a wait ({markers})")
                continue
            if all(o.not_open for o in marked.values()) and any(o.holders for o in marked.values()):
                results[key] = Result(
                    Outcome.RETRY_LATER,
                    f"{_where(h)}: committed, its markers written, but not yet visible ({view.describe()}): another "
                    f"transaction still open in the partition holds its records back ({markers}), an earlier batch of "
                    "this pipeline still in flight or another producer. They become visible when it ends; re-run the "
                    "commit task then")
                continue
            results[key] = Result(
                Outcome.RETRY_LATER,
                f"{_where(h)}: its coordinator reports the commit complete, but the records are not visible "
                f"({view.describe()}): a partition's commit marker was never written (Apache Kafka drops the markers "
                f"of a partition whose leader died as the transaction ended), and writing it did not end it "
                f"({markers}). Grant the commit task's Kafka principal ({principal(self.config)}) ALTER or "
                "CLUSTER_ACTION on the cluster (WriteTxnMarkers: the optional grant of `onceflow acls`), or find what "
                "holds the partition (kafka-transactions.sh find-hanging), then re-run the commit task "
                "(docs/security.md; docs/brokers.md, \"Hanging transactions\")",
            )
        return results

    def _await_complete_commit(self, handles: list[TxnHandle]) -> dict[str, TransactionState | None]:
        """Ask the coordinators until no transaction of ``handles`` is PrepareCommit any more, or
        ``timeout_s`` ran out: each id's last state for the recorded transaction (None: the coordinator
        shows another, or did not answer)."""
        last: dict[str, TransactionState | None] = {}
        waiting = {h.transactional_id: h for h in handles}
        deadline = time.monotonic() + self.timeout_s
        pause = 0.005
        with CoordinatorViews(self.config, self.timeout_s) as coordinators:
            while waiting:
                views = coordinators.describe(list(waiting), max(deadline - time.monotonic(), 0.1))
                for txn_id, h in list(waiting.items()):
                    last[txn_id] = _recorded_state(views, h)
                    if last[txn_id] is not TransactionState.PREPARE_COMMIT:
                        del waiting[txn_id]
                if not waiting or time.monotonic() + pause > deadline:
                    break
                time.sleep(pause)
                pause = min(pause * 2, 0.25)
        return last

    def _end_txns(self, handles: Sequence[TxnHandle], commit: bool) -> list[EndTxnReply]:
        return end_txns(self.config, [_identity(h) for h in handles], commit, self.timeout_s,
                        concurrent=self.broker.concurrent_end_txn)

    def _publish_withheld(self, h: TxnHandle) -> Result:
        """Copy the split's withheld records to the batch's withheld directory, once (write-once target)."""
        where, target = _where(h), withheld_file(self.staging_root, h)
        published = self.storage.read_bytes(target)
        if published is not None:  # a byte copy: the same digest, or another batch's file is in the way
            if hashlib.sha256(published).hexdigest() == h.withheld_sha256:
                return Result(Outcome.ALREADY_DONE, f"{where}: {h.withheld} withheld records published earlier")
            return Result(Outcome.FAILED, f"{where}: {target} holds other records than the {h.withheld} this batch "
                          "withheld (a file left from an earlier pipeline of the same name?); move it away and re-run commit")
        data = self.storage.read_bytes(h.withheld_uri)
        if data is None:
            return Result(Outcome.FAILED, f"{where}: the file of its {h.withheld} withheld records {h.withheld_uri} is "
                          "gone; they are NOT published. Restore it and re-run commit")
        if hashlib.sha256(data).hexdigest() != h.withheld_sha256:
            return Result(Outcome.FAILED, f"{where}: {h.withheld_uri} does not match the SHA-256 its vote recorded; "
                          "restore the file the vote names and re-run commit")
        self.storage.create_if_absent(target, data)  # a racing commit wrote the same bytes: either is fine
        return Result(Outcome.DONE, f"{where}: {h.withheld} records too large for the topic withheld to {target}")

    def _settle(self, obs: Observer, h: TxnHandle, view: SplitView, read: Read, cause: str, said: str = "") -> Result:
        """What the split's commit reports, as ``SETTLE`` says for what ``view`` shows when it was ``read``;
        ``cause`` is why it was read, ``said`` what ended it (EndTxn's or its coordinator's answer)."""
        where = _where(h)
        settled = SETTLE[view.state, read]
        if settled is Settled.COMMITTED:
            return Result(Outcome.DONE, f"{where}: committed ({said}), {h.records} records visible")
        if settled is Settled.ALREADY:
            return Result(Outcome.ALREADY_DONE, f"{where}: {view.state.value}")
        if settled is Settled.REPAIR:
            return self._repair(obs, h, where)
        if settled is Settled.STILL_OPEN:
            return self._still_open(h, where, cause, view)
        if settled is Settled.UNREADABLE:
            return self._unknown(where, view)
        return self._inconsistent(where, view)

    def _settle_read_back(self, obs: Observer, h: TxnHandle, before: SplitView, reply: EndTxnReply | None,
                          after: SplitView | None) -> Result:
        if before.state is not State.OPEN:
            return self._settle(obs, h, before, Read.BEFORE_END_TXN, "read before EndTxn")
        if reply.action in (Action.RETRY, Action.FAIL):
            return _end_txn_refused(_where(h), reply)
        return self._settle(obs, h, after, Read.AFTER_END_TXN, f"EndTxn(commit) answered {reply}", reply.error_name)

    def _still_open(self, h: TxnHandle, where: str, cause: str, after: SplitView) -> Result:
        age_ms = int(time.time() * 1000) - h.first_write_ms
        if age_ms > OVERDUE_TIMEOUTS * self.transaction_timeout_ms:
            return Result(
                Outcome.FAILED,
                f"{where}: {cause} but the transaction is still open ({after.describe()}) "
                f"{age_ms // 1000} s after its first write, over {OVERDUE_TIMEOUTS}x its transaction.timeout.ms "
                f"({self.transaction_timeout_ms}): this broker does not time transactions out, so waiting will not "
                "end it. Find what holds the partition's last stable offset (docs/brokers.md), end that transaction "
                "on the broker, then re-run the commit task (an aborted split is repaired from its staged copy)",
            )
        return Result(
            Outcome.RETRY_LATER,
            f"{where}: {cause} but the transaction is still open ({after.describe()}): "
            "the broker did not act on the recorded handle, or another open transaction holds the partition's "
            "last stable offset back; commit again later (a broker timeout makes it repairable)",
        )

    def _observe(self, obs: Observer, h: TxnHandle, settle: bool = False) -> SplitView:
        view = obs.settle([h]) if settle else obs.observe([h])
        return confirm_aborted(obs, [h], view)[0]

    def _unknown(self, where: str, view: SplitView) -> Result:
        return Result(
            Outcome.RETRY_LATER,
            f"{where}: could not read the output to its end within {self.timeout_s:.0f}s ({view.describe()}); "
            "commit again once the broker answers",
        )

    def _inconsistent(self, where: str, view: SplitView) -> Result:
        return Result(
            Outcome.FAILED,
            f"{where}: output is partly visible ({view.describe()}); not reporting success. Inspect the topic "
            "before re-running",
        )

    def _held_back(self, h: TxnHandle, where: str, view: SplitView) -> Result:
        """The broker aborted the split, and a repair's records wait behind another open transaction."""
        partitions = [v.partition for v in view.partitions if v.hidden_repairs]
        try:
            holders = "; ".join(f"p{p}: {', '.join(map(str, txns)) or 'DescribeProducers names none'}" for p, txns in sorted(
                open_transactions(self.config, h.topic, partitions, self.timeout_s).items()))
        except KafkaError as exc:  # naming them is a courtesy: the answer stands without it
            holders = f"DescribeProducers did not name them: {exc}"
        return Result(
            Outcome.RETRY_LATER,
            f"{where}: the broker aborted its transaction, and the records of its repair are held back "
            f"({view.describe()}): an open transaction holds the partition's last stable offset before them "
            f"({holders}), so no read can tell yet whether the repair committed, and nothing is published again. "
            "Commit again once that transaction ends (docs/brokers.md, \"A repair held back\")",
        )

    def _repair(self, obs: Observer, h: TxnHandle, where: str) -> Result:
        """Re-publish the staged copy in a fresh transaction under the repair id, once."""
        if not self._staged_exists(h):
            return Result(
                Outcome.FAILED,
                f"{where}: the broker aborted the transaction and the staged copy {h.staged_uri} is gone; "
                f"{h.records} records are NOT in the output. Restore the staged copy and re-run commit",
            )
        rid = repair_id(h.transactional_id)
        producer = Producer(producer_config(self.config, rid, **{"linger.ms": 20,
                                                                 "transaction.timeout.ms": self.transaction_timeout_ms},
                                            **({"message.max.bytes": h.max_record_bytes} if h.max_record_bytes else {})))
        try:
            producer.init_transactions(self.timeout_s)  # fences other repairers, aborts a half-done repair
            again = self._observe(obs, h)
            if again.state is State.REPAIRED:
                return Result(Outcome.ALREADY_DONE, f"{where}: repaired earlier")
            if again.state is State.HELD_BACK:  # not a repair this fence ended: one held back by another producer
                return self._held_back(h, where, again)
            if again.state is State.UNKNOWN:
                return self._unknown(where, again)
            if again.state is not State.ABORTED:
                return self._inconsistent(where, again)
            try:
                table = open_staged(h.staged_uri, self.storage, h.staged_sha256)
            except StagedCopyDamaged as exc:
                return Result(Outcome.FAILED, f"{where}: the broker aborted the transaction and {exc}; {h.records} records "
                              "are NOT in the output. Restore the staged copy the vote names and re-run commit")
            base = handle_headers(h) + [REPAIR]
            producer.begin_transaction()
            for row in table.to_pylist():
                user = [(x["key"], x["value"]) for x in row["headers"]] if row["headers"] else []
                produce_waiting(producer, h.topic, row["value"], row["key"], row["partition"], headers=base + user)
            producer.commit_transaction(self.timeout_s)
        except KafkaException as exc:
            refusals.check(self.config, exc.args[0].code(), f"{where}: re-publishing its staged copy under {rid}",
                           {Resource.TOPIC: ("WRITE", h.topic), Resource.TRANSACTIONAL_ID: ("WRITE", rid)})
            return Result(Outcome.RETRY_LATER, f"{where}: repair under {rid} did not complete: {exc.args[0]}")
        finally:
            producer.flush(0)
        after = self._observe(obs, h, settle=True)
        if after.state is State.REPAIRED:
            return Result(Outcome.DONE, f"{where}: transaction was aborted by the broker; repaired from the staged copy ({h.records} records)")
        if after.state is State.HELD_BACK:
            return self._held_back(h, where, after)
        if after.state is State.UNKNOWN:
            return self._unknown(where, after)
        return self._inconsistent(where, after)

    # -- abort ----------------------------------------------------------------------

    def abort(self, plan: Plan, votes: Sequence[Vote]) -> Result:
        """End known transactions, fence every id the plan allows, delete staging."""
        voted = [h for vote in votes for h in handles_of(vote) if h.partitions]
        written = [h for h in voted if h.transactional]
        replies = self._end_txns(written, commit=False)
        details = [f"{h.transactional_id}: EndTxn(abort) {reply.error_name}" for h, reply in zip(written, replies)]
        details += [f"split {h.split}: {h.records} record(s) stay visible ({h.guarantee}: written without a transaction)"
                    for h in voted if not h.transactional]
        try:
            ids = plan.sink(self.name).transactional_ids
        except KeyError as exc:
            return Result(Outcome.FAILED, str(exc))
        try:
            fence_transactional_ids(self.config, ids, self.timeout_s)
        except FencingError as exc:
            return Result(Outcome.RETRY_LATER, str(exc))
        left = [self._left(h, view) for h, view in zip(written, observe(self.config, written, self.timeout_s))]
        unfinished = _worst([r for r in left if r is not None and not r.ok])
        if not unfinished.ok:
            return unfinished  # staging stays: a split not ended may still need it, one committed outside is evidence
        details += [r.detail for r in left if r is not None]
        self._delete_staging(plan.batch_id)
        return Result(Outcome.DONE, f"fenced {len(ids)} transactional id(s); " + "; ".join(details))

    def _left(self, h: TxnHandle, view: SplitView) -> Result | None:
        """What the abort reports for the split, as ``ABORT_LEFT`` says (None: aborted, nothing to say)."""
        where, left = _where(h), left_after_abort(view.state, self.broker)
        if left is Left.ABORTED:
            return None
        if left is Left.NOT_ENDED:
            return Result(Outcome.RETRY_LATER, f"{where}: {view.state.value} after fencing ({view.describe()}); "
                          "run the rollback again")
        if left is Left.SHOWN:
            return Result(Outcome.DONE, f"{where}: visible after the abort ({view.describe()}), as every aborted "
                          f"record is on a broker of profile {self.broker.name!r}")
        return Result(
            Outcome.FAILED,
            f"{where}: visible after the abort ({view.describe()}) on a broker whose profile ({self.broker.name!r}) "
            f"hides aborted records, so the transaction was committed without a COMMIT decision, by something other "
            f"than this pipeline's commit (another deployment of pipeline {self.pipeline!r}, or a tool that ended "
            "the transaction from its handle). Readers have seen records of a batch that is not committed, and a "
            "replay would write them again: the batch stays ABORTING and the pipeline stops here. Stop that "
            "writer, then decide what becomes of these records (docs/brokers.md, \"Visible after an abort\")",
        )

    # -- staging --------------------------------------------------------------------

    def _staged_exists(self, h: TxnHandle) -> bool:
        return self.storage.size(h.staged_uri) is not None

    def _delete_staging(self, batch_id: str) -> None:
        self.storage.delete_tree(kafka_staging_dir(self.staging_root, self.pipeline, self.name, batch_id))

    def after_commit(self, plan: Plan) -> None:
        """After the batch is committed: its staged copies are no longer needed. Idempotent."""
        self._delete_staging(plan.batch_id)
