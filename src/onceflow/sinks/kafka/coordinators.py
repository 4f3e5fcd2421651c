"""Where each transaction stands, as its coordinator says (DescribeTransactions, KIP-664).

Runs on an Airflow worker (commit task). A commit asks before EndTxn where
the broker profile ``describes_transactions``, and while a coordinator says
PrepareCommit. CompleteCommit is not proof that every partition has its
commit marker: Apache Kafka drops the markers of a partition whose leader
died as the transaction ended, and the transaction hangs there
(docs/brokers.md, "Hanging transactions"; ``markers``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kafka.admin import TransactionState
from kafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError, RequestTimedOutError
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin.transactions import DescribeTransactionsRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import kafka_python_config
from onceflow.sinks.kafka.broker_answers import TRANSACTIONAL_ID_NOT_FOUND, Action, classify
from onceflow.sinks.kafka.handle import TxnHandle

log = logging.getLogger(__name__)


def find_coordinators(client, transactional_ids: Sequence[str], timeout_ms: int) -> dict[str, tuple[int, int]]:
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
        answers.update(find_coordinators(client, [txn_id], timeout_ms))
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
                for txn_id, (error, node) in find_coordinators(client, wanted, timeout_ms).items():
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


def recorded_state(views: Mapping[str, CoordinatorView], h: TxnHandle) -> TransactionState | None:
    """The coordinator's state of the transaction the handle recorded; None if it shows another (a newer
    epoch: aborted by a timeout, fenced) or nothing."""
    view = views.get(h.transactional_id)
    return view.state if view is not None and view.is_of(h.producer_id, h.epoch) else None
