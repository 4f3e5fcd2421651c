"""Fence transactional ids: abort whatever they left open, lock out zombies.

Runs on an Airflow worker (rollback task, recovery, and before a repair).
``init_transactions`` on an id makes the coordinator abort that id's open
transaction and bump its epoch, so any producer still holding the old epoch
(a zombie Spark task) is refused from then on. Idempotent: fencing an id
again only bumps the epoch once more.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from confluent_kafka import KafkaException, Producer

from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import producer_config


# A fence opens no transaction: its transaction.timeout.ms need only be one that every broker accepts
# (at most its transaction.max.timeout.ms; librdkafka's 60 s default is refused by a broker set lower).
FENCE_TRANSACTION_TIMEOUT_MS = 1000


class FencingError(RuntimeError):
    """An id could not be fenced; its open transaction may still commit."""


def fence_transactional_ids(config: Mapping[str, Any], ids: Iterable[str], timeout_s: float = 30.0) -> list[str]:
    """``init_transactions`` on every id; returns the ids fenced."""
    fenced = []
    for txn_id in ids:
        producer = Producer(producer_config(config, txn_id, **{"transaction.timeout.ms": FENCE_TRANSACTION_TIMEOUT_MS}))
        try:
            producer.init_transactions(timeout_s)
        except KafkaException as exc:
            refusals.check(config, exc.args[0].code(), "fencing it: init_transactions",
                           {Resource.TRANSACTIONAL_ID: ("WRITE", txn_id)})
            raise FencingError(
                f"could not fence transactional.id {txn_id}: {exc.args[0]}; its open transaction may still be "
                "pending. Check the broker is reachable and retry the rollback task"
            ) from None
        finally:
            producer.flush(0)
        fenced.append(txn_id)
    return fenced
