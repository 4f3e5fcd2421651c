"""EndTxn from any process, for a transaction another process left open.

The one place onceflow speaks the Kafka protocol itself: confluent-kafka has
no call to finish someone else's transaction. Flink resumes a transaction
after a restore the same way: FindCoordinator(key_type=1, transactional.id),
then EndTxn(transactional.id, producer id, epoch, commit|abort) to that
coordinator. Runs on an Airflow worker (commit and rollback tasks).

Each broker answer maps to exactly one action in ``ACTIONS``
(``broker_answers``); this module retries transient errors itself until
``timeout_s``. A retried EndTxn with the same outcome answers no error on
every broker tried (docs/brokers.md). Where each transaction stands is asked
in ``coordinators``; a hanging transaction's markers are written in
``markers``.

The request version is chosen on purpose, never negotiated up: Apache Kafka
4.x takes EndTxn v5 and newer on the transactions-v2 path (KIP-890: the epoch
is bumped at every commit), v0-v4 on the v1 path. onceflow's producers
(librdkafka) begin their transactions on v1, and each vote's handle records
that version; EndTxn speaks at most ``END_TXN_MAX_VERSION[that version]``
whatever kafka-python and the broker could agree on (docs/brokers.md).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError, RequestTimedOutError
from kafka.net.compat import KafkaNetClient
from kafka.protocol.producer import EndTxnRequest

from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import kafka_python_config
from onceflow.sinks.kafka.broker_answers import CONNECTION_CLOSED, COORDINATOR_NOT_AVAILABLE, Action, classify
from onceflow.sinks.kafka.broker_answers import ACTIONS as ACTIONS  # docs/brokers.md names it here
from onceflow.sinks.kafka.coordinators import find_coordinators

log = logging.getLogger(__name__)


# EndTxn requests in flight at once, where the broker profile allows it (each has its own connection).
MAX_CONCURRENT_END_TXN = 8
# Transaction protocol version -> the newest EndTxn request version on its path. v2 (epoch bumped at
# every EndTxn, KIP-890) is not spoken: a handle that names it is refused, not guessed at.
END_TXN_MAX_VERSION = {1: 4}

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
        error, coordinator = find_coordinators(client, [transactional_id], timeout_ms)[transactional_id]
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
