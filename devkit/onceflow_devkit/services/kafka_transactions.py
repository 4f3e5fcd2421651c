"""The transactional ids a cluster's coordinators hold, as ListTransactions answers an admin."""

from __future__ import annotations

from typing import Any, Mapping

from kafka.admin import KafkaAdminClient

from onceflow.kafka.config import kafka_python_config


def list_transactional_ids(config: Mapping[str, Any], prefix: str = "") -> set[str]:
    """Every id beginning with ``prefix`` that some coordinator remembers, in any state (every broker
    is asked: each holds a slice of ``__transaction_state``). Needs DESCRIBE on the ids (an admin)."""
    admin = KafkaAdminClient(**kafka_python_config(config))
    try:
        listings = admin.list_transactions()
    finally:
        admin.close()
    return {t.transactional_id for per_broker in listings.values() for t in per_broker
            if t.transactional_id.startswith(prefix)}
