"""Transactions as only Apache Kafka answers them, on 4.x and on 3.9 (the embedded brokers differ
here: docs/brokers.md).

- The commit task's EndTxn takes the transactions-v1 path that librdkafka's producers began on: it
  speaks at most v4, whatever the broker offers (4.x offers v5, the KIP-890 v2 path). Each handle
  records the protocol version; one that names another is refused, never guessed at.
- A split that produced nothing has no transaction to end: Apache Kafka answers INVALID_TXN_STATE to
  an EndTxn for it (FLINK-31363), so commit and abort leave it alone.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from kafka.net.compat import KafkaNetClient

from onceflow.kafka.config import kafka_python_config
from onceflow.sinks.kafka.participant import KafkaSinkParticipant
from onceflow.sinks.kafka.handle import handles_of
from onceflow.sinks.kafka.txn_protocol import end_txn
from onceflow.sinks.kafka.broker_answers import Action
from onceflow.sinks.kafka.handle import TRANSACTION_VERSION
from onceflow.sinks.kafka.ids import transactional_ids
from onceflow.core.participant import Outcome
from onceflow.core.plan import Plan, SinkPlan
from tests.integration.kafka.helpers import batch_value, create_topic, precommit_batch, read_committed

END_TXN = 26  # the EndTxn API key


def offered_end_txn_version(config) -> int:
    client = KafkaNetClient(**kafka_python_config(config))
    try:
        client.get_broker_version(10_000)
        return client._manager.broker_version_data.api_versions[END_TXN][1]
    finally:
        client.close()


@pytest.mark.parametrize("broker_name, offered", [("apache", 5), ("apache-3.9", 4)])
def test_the_commit_speaks_end_txn_v4_whatever_the_broker_offers(_brokers, broker_name, offered, tmp_path):
    broker = _brokers.get(broker_name)
    config = broker.config()
    topic = create_topic(config, partitions=2, prefix="v1path")
    [handle] = handles_of(precommit_batch(config, topic, tmp_path, f"p-{uuid.uuid4().hex[:6]}", (50,)))
    assert handle.transaction_version == TRANSACTION_VERSION == 1
    assert offered_end_txn_version(config) >= offered  # on 4.x, negotiating would have sent v5

    reply = end_txn(config, handle.transactional_id, handle.producer_id, handle.epoch, True,
                    transaction_version=handle.transaction_version)

    assert (reply.error_name, reply.version) == ("NONE", 4), reply
    assert len(read_committed(config, topic, 2)) == 50
    refused = end_txn(config, handle.transactional_id, handle.producer_id, handle.epoch, True, transaction_version=2)
    assert refused.action is Action.FAIL and refused.version is None and "TRANSACTION_VERSION_2" in refused.error_name


def test_an_empty_split_beside_a_full_one_commits_and_aborts_on_apache_kafka(_brokers, tmp_path):
    broker = _brokers.get("apache")
    config = broker.config()
    topic = create_topic(config, partitions=2, prefix="empty")
    pipeline = f"p-{uuid.uuid4().hex[:6]}"
    vote = precommit_batch(config, topic, tmp_path, pipeline, (0, 30))
    empty = handles_of(vote)[0]
    assert empty.records == 0 and not empty.partitions
    # What the broker says to an EndTxn for the empty split: the reason the sink must not send it.
    assert end_txn(config, empty.transactional_id, empty.producer_id, empty.epoch, True,
                   transaction_version=1).error_name == "INVALID_TXN_STATE"
    participant = KafkaSinkParticipant("out", pipeline, config, staging_root=str(tmp_path))

    assert participant.verify(vote).outcome is Outcome.DONE
    result = participant.commit(vote)

    assert result.outcome is Outcome.DONE, result.detail
    assert Counter(v for _, v, _ in read_committed(config, topic, 2)) == Counter(batch_value(1, 1, i) for i in range(30))
    assert participant.commit(vote).outcome is Outcome.ALREADY_DONE

    # The same shape aborted (another pipeline's batch): nothing of it is visible, and abort says done.
    other = f"p-{uuid.uuid4().hex[:6]}"
    aborted = precommit_batch(config, topic, tmp_path, other, (0, 20))
    aborting = KafkaSinkParticipant("out", other, config, staging_root=str(tmp_path))
    plan = Plan(other, 1, (), (SinkPlan("out", "kafka", 2, transactional_ids(other, "out", 2, 1)),))
    assert aborting.abort(plan, [aborted]).outcome is Outcome.DONE
    assert len(read_committed(config, topic, 2)) == 30
