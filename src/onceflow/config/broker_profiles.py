"""Broker profiles: what a Kafka broker needs from onceflow, one row per broker.

Apache Kafka is the reference and the default (``apache``). A Kafka-compatible
broker that deviates where the protocol leans on the broker gets a row here,
never an ``if`` elsewhere (docs/brokers.md has the measurements behind each).

The profile is part of the Kafka connection: ``onceflow.broker.profile`` among
its librdkafka settings (an Airflow connection's extra, or
``ONCEFLOW_KAFKA_CONFIG``). ``KafkaCluster`` takes it out of the settings, so
no client sees it, and carries it as ``KafkaCluster.profile``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from onceflow.config.settings import ConfigurationError

PROFILE_KEY = "onceflow.broker.profile"


@dataclass(frozen=True)
class BrokerProfile:
    name: str
    # read_committed consumers never see records of aborted transactions. Where they do, only the
    # votes tell a committed record from an aborted one: the audit keeps the offsets they name.
    hides_aborted: bool = True
    # EndTxn requests for several transactional ids may be in flight at once.
    concurrent_end_txn: bool = True
    # DescribeTransactions tells where each transaction stands: a commit asks the coordinator instead of
    # scanning the data before EndTxn, and waits while it says PrepareCommit. (Its data is read after
    # EndTxn on every broker: CompleteCommit is not proof, docs/brokers.md.)
    describes_transactions: bool = True


PROFILES: dict[str, BrokerProfile] = {
    "apache": BrokerProfile("apache"),
    # noida-db: it answers "no error" to an EndTxn it ignored, and its DescribeTransactions was checked
    # only from open to committed (test_broker_capabilities.py): the data is scanned before EndTxn too.
    "noida": BrokerProfile("noida", describes_transactions=False),
    # Tansu 0.6: aborted records stay visible to read_committed consumers; two EndTxn sent at once
    # once left one of the transactions open for good (a chaos run).
    "tansu": BrokerProfile("tansu", hides_aborted=False, concurrent_end_txn=False, describes_transactions=False),
}


def profile(name: Any) -> BrokerProfile:
    if name not in PROFILES:
        raise ConfigurationError(
            f"Kafka setting {PROFILE_KEY}={name!r} is not a broker profile: use one of {', '.join(PROFILES)} "
            "(apache for Apache Kafka and the services built on it)"
        )
    return PROFILES[name]


def split_profile(config: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The librdkafka settings without the profile setting, and the profile's name (``apache`` if none)."""
    settings = dict(config)
    name = settings.pop(PROFILE_KEY, "apache")
    return settings, profile(name).name
