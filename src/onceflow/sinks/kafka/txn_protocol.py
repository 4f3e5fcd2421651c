"""EndTxn from any process, for a transaction another process left open.

The one place onceflow speaks the Kafka protocol itself: confluent-kafka has
no call to finish someone else's transaction. Flink resumes a transaction
after a restore the same way: FindCoordinator(key_type=1, transactional.id),
then EndTxn(transactional.id, producer id, epoch, commit|abort) to that
coordinator. Runs on an Airflow worker (commit and rollback tasks).

Each broker answer maps to exactly one action in ``ACTIONS``. The caller
never takes DONE as proof: some brokers answer "no error" to an EndTxn that
did nothing (noida-db with a wrong producer id), so the sink verifies
visibility afterwards. A connection closed without an answer (Tansu, stale
epoch) is an explicit outcome too, handled like a fencing error.

Idempotency: a retried EndTxn with the same outcome answers no error on every
broker tried (docs/brokers.md); this module retries transient errors itself
until ``timeout_s``.

``describe_transactions`` asks the same coordinators where each transaction
stands (DescribeTransactions, KIP-664). CompleteCommit is not proof that
every partition has its commit marker: Apache Kafka drops the markers of a
partition whose leader died as the transaction ended, and the transaction
hangs there (docs/brokers.md, "Hanging transactions").
``write_commit_markers`` finishes such a transaction as its coordinator
should have: a COMMIT marker, written to the partition (WriteTxnMarkers, as
``kafka-transactions.sh abort`` writes an ABORT one).

The request version is chosen on purpose, never negotiated up: Apache Kafka
4.x takes EndTxn v5 and newer on the transactions-v2 path (KIP-890: the epoch
is bumped at every commit), v0-v4 on the v1 path. onceflow's producers
(librdkafka) begin their transactions on v1, and each vote's handle records
that version; EndTxn speaks at most ``END_TXN_MAX_VERSION[that version]``
whatever kafka-python and the broker could agree on (docs/brokers.md).
"""

from __future__ import annotations

import enum
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kafka.admin import TransactionState
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, NodeNotReadyError, RequestTimedOutError
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin.transactions import DescribeTransactionsRequest
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import EndTxnRequest

from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import kafka_python_config

log = logging.getLogger(__name__)


class Action(enum.Enum):
    DONE = "done"            # the coordinator accepted it (still to be verified)
    RETRY = "retry"          # transient: ask again, maybe another coordinator
    VERIFY = "verify"        # the handle is stale: look at the data, then decide
    FAIL = "fail"            # configuration or permission problem: a human must act


CONNECTION_CLOSED = -1000    # pseudo error code: the broker closed the connection without answering
COORDINATOR_NOT_AVAILABLE = 15
TRANSACTIONAL_ID_NOT_FOUND = 105  # DescribeTransactions: the coordinator keeps no state for the id (expired, never used)

# EndTxn requests in flight at once, where the broker profile allows it (each has its own connection).
MAX_CONCURRENT_END_TXN = 8
# Transaction protocol version -> the newest EndTxn request version on its path. v2 (epoch bumped at
# every EndTxn, KIP-890) is not spoken: a handle that names it is refused, not guessed at.
END_TXN_MAX_VERSION = {1: 4}

# error code -> (name, action). Anything not listed is FAIL: unknown is not success.
ACTIONS: dict[int, tuple[str, Action]] = {
    0: ("NONE", Action.DONE),
    7: ("REQUEST_TIMED_OUT", Action.RETRY),
    14: ("COORDINATOR_LOAD_IN_PROGRESS", Action.RETRY),
    15: ("COORDINATOR_NOT_AVAILABLE", Action.RETRY),
    16: ("NOT_COORDINATOR", Action.RETRY),
    51: ("CONCURRENT_TRANSACTIONS", Action.RETRY),
    47: ("INVALID_PRODUCER_EPOCH", Action.VERIFY),
    48: ("INVALID_TXN_STATE", Action.VERIFY),
    49: ("INVALID_PRODUCER_ID_MAPPING", Action.VERIFY),
    90: ("PRODUCER_FENCED", Action.VERIFY),
    102: ("TRANSACTION_ABORTABLE", Action.VERIFY),
    CONNECTION_CLOSED: ("CONNECTION_CLOSED_WITHOUT_RESPONSE", Action.VERIFY),
    53: ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", Action.FAIL),
    31: ("CLUSTER_AUTHORIZATION_FAILED", Action.FAIL),
    35: ("UNSUPPORTED_VERSION", Action.FAIL),
}


@dataclass(frozen=True)
class EndTxnReply:
    action: Action
    error_code: int
    error_name: str
    attempts: int
    # The EndTxn request version the last attempt spoke (None: no EndTxn was sent).
    version: int | None = None

    def __str__(self) -> str:
        return f"{self.error_name} ({self.error_code}) after {self.attempts} attempt(s) -> {self.action.value}"


def classify(error_code: int) -> tuple[str, Action]:
    return ACTIONS.get(error_code, (f"UNKNOWN_ERROR_{error_code}", Action.FAIL))


def end_txn(
    config: Mapping[str, Any],
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    timeout_s: float = 30.0,
    *,
    transaction_version: int,
) -> EndTxnReply:
    """Send EndTxn for the recorded handle, on the path of the transaction protocol version its
    producer began on; retry RETRY answers until ``timeout_s``.

    Returns the last answer; the caller acts on ``reply.action``.
    """
    if transaction_version not in END_TXN_MAX_VERSION:
        return EndTxnReply(Action.FAIL, 35, f"UNSUPPORTED_TRANSACTION_VERSION_{transaction_version}", 0)
    max_version = END_TXN_MAX_VERSION[transaction_version]
    deadline = time.monotonic() + timeout_s
    attempts = 0
    backoff = 0.05
    client = KafkaNetClient(**kafka_python_config(config), request_timeout_ms=int(min(timeout_s, 30) * 1000))
    try:
        while True:
            attempts += 1
            version = None
            try:
                code, version = _find_and_end(client, transactional_id, producer_id, producer_epoch, commit, timeout_s,
                                              max_version)
            except (KafkaConnectionError, ConnectionError) as exc:
                log.info("EndTxn for %s: connection closed without response (%s)", transactional_id, exc)
                code = CONNECTION_CLOSED
            except (KafkaTimeoutError, RequestTimedOutError, NodeNotReadyError):  # the request may have arrived: retry
                code = 7
            refusals.check(config, code, f"EndTxn({'commit' if commit else 'abort'}) of the transaction it names",
                           {Resource.TRANSACTIONAL_ID: ("WRITE", transactional_id)})
            name, action = classify(code)
            if action is not Action.RETRY or time.monotonic() + backoff > deadline:
                return EndTxnReply(action, code, name, attempts, version)
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
    finally:
        client.close()


def end_txns(
    config: Mapping[str, Any],
    handles: Sequence[tuple[str, int, int, int]],
    commit: bool,
    timeout_s: float = 30.0,
    *,
    concurrent: bool,
) -> list[EndTxnReply]:
    """``end_txn`` for each (transactional id, producer id, epoch, transaction version), at once when
    ``concurrent`` (the broker profile says whether EndTxn requests may overlap), else one after
    another. Answers come back in the order of ``handles``."""
    def one(handle: tuple[str, int, int, int]) -> EndTxnReply:
        tid, pid, epoch, version = handle
        return end_txn(config, tid, pid, epoch, commit, timeout_s, transaction_version=version)

    if not concurrent or len(handles) < 2:
        return [one(h) for h in handles]
    with ThreadPoolExecutor(max_workers=min(len(handles), MAX_CONCURRENT_END_TXN)) as pool:
        return list(pool.map(one, handles))


def _find_and_end(client, transactional_id: str, producer_id: int, epoch: int, commit: bool, timeout_s: float,
                  max_version: int) -> tuple[int, int | None]:
    """(error code, EndTxn version spoken): FindCoordinator, then EndTxn to that coordinator."""
    timeout_ms = int(timeout_s * 1000)
    client.get_broker_version(timeout_ms)
    try:
        error, coordinator = _find_coordinators(client, [transactional_id], timeout_ms)[transactional_id]
    except (KafkaConnectionError, ConnectionError):
        # The node asked for the coordinator is gone (a dead broker still in the metadata): no EndTxn
        # was sent, so ask another; only EndTxn's own connection closing is an answer (VERIFY).
        return COORDINATOR_NOT_AVAILABLE, None
    if error:
        return error, None
    request = EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch,
                            committed=commit, max_version=max_version)
    reply = client.send_and_receive(coordinator, request, timeout_ms=timeout_ms)
    return reply.error_code, request.API_VERSION


def _find_coordinators(client, transactional_ids: Sequence[str], timeout_ms: int) -> dict[str, tuple[int, int]]:
    """transactional id -> (FindCoordinator error code, coordinator node id); one request for all of
    them where the broker takes several keys (FindCoordinator v4+), else one each."""
    node = client.least_loaded_node()
    found = client.send_and_receive(
        node,
        FindCoordinatorRequest(key=transactional_ids[0], key_type=1, coordinator_keys=list(transactional_ids)),
        timeout_ms=timeout_ms,
    )
    if found.coordinators:  # v4+: one entry per key
        return {entry.key: (entry.error_code, entry.node_id) for entry in found.coordinators}
    answers = {transactional_ids[0]: (found.error_code, found.node_id)}
    for txn_id in transactional_ids[1:]:
        answers.update(_find_coordinators(client, [txn_id], timeout_ms))
    return answers


@dataclass(frozen=True)
class CoordinatorView:
    """What a transactional id's coordinator says of its latest transaction (DescribeTransactions).

    ``state`` None: the coordinator keeps nothing for the id (its producer id
    mapping expired, or it was never used).
    """
    state: TransactionState | None
    producer_id: int = -1
    producer_epoch: int = -1
    coordinator: int = -1  # the node that answered

    def is_of(self, producer_id: int, producer_epoch: int) -> bool:
        """The state is that of the transaction a vote recorded (its producer id and epoch)."""
        return (self.producer_id, self.producer_epoch) == (producer_id, producer_epoch)

    def __str__(self) -> str:
        if self.state is None:
            return "unknown to its coordinator"
        return f"{self.state.value} (producer id {self.producer_id}, epoch {self.producer_epoch})"


class CoordinatorViews:
    """Asks transactions' coordinators where each stands, over one client kept open across calls
    (a commit polls until PrepareCommit ends: a new client per poll paid a bootstrap and version
    probe every time)."""

    def __init__(self, config: Mapping[str, Any], request_timeout_s: float = 30.0) -> None:
        self._timeout_ms = int(min(request_timeout_s, 30) * 1000)
        self._config = config
        self._client = KafkaNetClient(**kafka_python_config(config), request_timeout_ms=self._timeout_ms)

    def __enter__(self) -> "CoordinatorViews":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def describe(self, transactional_ids: Sequence[str], timeout_s: float = 30.0) -> dict[str, CoordinatorView]:
        """Each id's coordinator's view of its latest transaction, asking each coordinator once for
        all its ids; RETRY answers are asked again until ``timeout_s``.

        An id missing from the answer could not be described (no coordinator in
        time, or an error that is not transient, such as a missing DESCRIBE
        permission on the transactional id): the caller reads the data instead.
        """
        views: dict[str, CoordinatorView] = {}
        wanted = list(dict.fromkeys(transactional_ids))
        deadline = time.monotonic() + timeout_s
        timeout_ms = min(self._timeout_ms, max(int(timeout_s * 1000), 100))
        backoff = 0.02
        client = self._client
        while wanted:
            retry: list[str] = []
            try:
                client.get_broker_version(timeout_ms)
                by_coordinator: dict[int, list[str]] = {}
                for txn_id, (error, node) in _find_coordinators(client, wanted, timeout_ms).items():
                    if error:
                        self._skip_or_retry(txn_id, error, retry)
                    else:
                        by_coordinator.setdefault(node, []).append(txn_id)
                for node, ids in by_coordinator.items():
                    reply = client.send_and_receive(node, DescribeTransactionsRequest(transactional_ids=ids),
                                                    timeout_ms=timeout_ms)
                    for entry in reply.transaction_states:
                        if entry.error_code == 0:
                            views[entry.transactional_id] = CoordinatorView(
                                TransactionState(entry.transaction_state), entry.producer_id, entry.producer_epoch, node)
                        elif entry.error_code == TRANSACTIONAL_ID_NOT_FOUND:
                            views[entry.transactional_id] = CoordinatorView(None, coordinator=node)
                        else:
                            self._skip_or_retry(entry.transactional_id, entry.error_code, retry)
            except (KafkaConnectionError, ConnectionError, KafkaTimeoutError, RequestTimedOutError, NodeNotReadyError):
                retry = [i for i in wanted if i not in views]
            wanted = retry
            if not wanted or time.monotonic() + backoff > deadline:
                return views
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.5)
        return views


    def _skip_or_retry(self, transactional_id: str, error_code: int, retry: list[str]) -> None:
        """A transient answer is asked again; a refusal names the grant (``NotAuthorized``); any other
        leaves the id undescribed, for the caller to read its data instead."""
        refusals.check(self._config, error_code, "DescribeTransactions of the transaction it names",
                       {Resource.TRANSACTIONAL_ID: ("WRITE", transactional_id)})
        name, action = classify(error_code)
        if action is Action.RETRY:
            retry.append(transactional_id)
        else:
            log.warning("DescribeTransactions for %s answered %s: reading its data instead", transactional_id, name)


def describe_transactions(config: Mapping[str, Any], transactional_ids: Sequence[str],
                          timeout_s: float = 30.0) -> dict[str, CoordinatorView]:
    """One question to the coordinators (``CoordinatorViews.describe``) on a client of its own."""
    with CoordinatorViews(config, timeout_s) as coordinators:
        return coordinators.describe(transactional_ids, timeout_s)


@dataclass(frozen=True)
class MarkerOutcome:
    """What writing a COMMIT marker to one partition came to."""

    written: bool = False
    refused: str | None = None  # the broker's error, or why nothing answered
    # Not written because the transaction is not open there: the other transactions open in the partition.
    holders: tuple[str, ...] = ()

    @property
    def not_open(self) -> bool:
        return not self.written and self.refused is None

    def __str__(self) -> str:
        if self.written:
            return "written"
        if self.refused:
            return self.refused
        return "not open" + (f"; held back by {', '.join(self.holders)}" if self.holders else "")


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction open in a partition (DescribeProducers): it holds the partition's last stable offset."""

    producer_id: int
    producer_epoch: int
    start_offset: int

    def __str__(self) -> str:
        return f"producer {self.producer_id} since offset {self.start_offset}"


def open_transactions(config: Mapping[str, Any], topic: str, partitions: Sequence[int],
                      timeout_s: float = 30.0) -> dict[int, tuple[OpenTransaction, ...]]:
    """Per partition of ``topic``, the transactions open in it (DescribeProducers: READ on the topic)."""
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KafkaTopicPartition

    admin = KafkaAdminClient(**kafka_python_config(config), request_timeout_ms=int(min(timeout_s, 30) * 1000))
    try:
        described = admin.describe_producers([KafkaTopicPartition(topic, p) for p in partitions])
    except KafkaError as exc:
        refusals.check_exception(config, exc, "DescribeProducers of the partitions an open transaction holds",
                                 {Resource.TOPIC: ("READ", topic)})
        raise
    finally:
        admin.close()
    return {tp.partition: tuple(OpenTransaction(p.producer_id, p.producer_epoch, p.current_transaction_start_offset)
                                for p in state.active_producers if p.current_transaction_start_offset >= 0)
            for tp, state in described.items()}


def write_commit_markers(config: Mapping[str, Any], topic: str, partitions: Sequence[int], producer_id: int,
                         producer_epoch: int, timeout_s: float = 30.0) -> dict[int, MarkerOutcome]:
    """Write a COMMIT marker for the transaction (producer id, epoch) to each of ``partitions`` that
    still holds it open; partition -> what happened (where it is not open: which other open
    transactions hold the partition's stable end back).

    Only for a transaction its coordinator reports CompleteCommit: that is the decision the marker
    carries. The partition leader checks the producer id and epoch (a fenced or newer epoch is
    refused), and takes coordinator epoch -1 as an operator's marker, as Kafka's own admin abort
    does. Writing markers needs ALTER or CLUSTER_ACTION on the cluster (an optional grant of
    ``onceflow.kafka.acls``); its refusal is an answer like any other, naming the principal.
    """
    from confluent_kafka.admin import AdminClient

    from onceflow.kafka.config import base_config

    timeout_ms = int(min(timeout_s, 30) * 1000)
    settings = kafka_python_config(config)
    holders = open_transactions(config, topic, partitions, timeout_s)
    ours = (producer_id, producer_epoch)
    open_in = [p for p, txns in holders.items() if any((t.producer_id, t.producer_epoch) == ours for t in txns)]
    others = {p: tuple(str(t) for t in txns if (t.producer_id, t.producer_epoch) != ours) for p, txns in holders.items()}
    outcome = {p: MarkerOutcome(holders=others.get(p, ())) for p in partitions if p not in open_in}
    if not open_in:
        return outcome
    leaders = AdminClient(base_config(config)).list_topics(topic, timeout=timeout_s).topics[topic].partitions
    marker = WriteTxnMarkersRequest.WritableTxnMarker
    client = KafkaNetClient(**settings, request_timeout_ms=timeout_ms)
    try:
        client.get_broker_version(timeout_ms)
        for partition in open_in:
            request = WriteTxnMarkersRequest(markers=[marker(
                producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=True,
                topics=[marker.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])], coordinator_epoch=-1)])
            reply = client.send_and_receive(leaders[partition].leader, request, timeout_ms=timeout_ms)
            code = next(p.error_code for m in reply.markers for t in m.topics for p in t.partitions)
            refused = refusals.refusal(config, code, "WriteTxnMarkers: the commit marker its coordinator dropped",
                                       {Resource.CLUSTER: ("ALTER or CLUSTER_ACTION", "")})
            outcome[partition] = (MarkerOutcome(written=True) if code == 0 else
                                  MarkerOutcome(refused=str(refused) if refused else classify(code)[0]))
    except (KafkaConnectionError, ConnectionError, KafkaTimeoutError, RequestTimedOutError, NodeNotReadyError) as exc:
        outcome.update({p: MarkerOutcome(refused=f"no answer ({type(exc).__name__})") for p in open_in if p not in outcome})
    finally:
        client.close()
    return outcome
