"""What each broker capability the dev kit declares means, checked on the broker matrix.

``kafka_broker.CAPABILITIES`` says which brokers behave as Apache Kafka does where the protocol
leans on the broker; the tests that rely on a behaviour name it (``tests.support.require``) and
are skipped on a broker without it. The tests here check the declarations themselves: on Apache
Kafka in ``make test`` (every capability Apache Kafka is declared to have is required by some
test of ``make test``: tests/unit/devkit/test_capabilities_are_proven.py), on the compatible
brokers in the slow set.
"""

from __future__ import annotations

import uuid
from collections import Counter

from confluent_kafka import Consumer, TopicPartition

from onceflow.sinks.kafka.fencing import fence_transactional_ids
from onceflow.sinks.kafka.participant import KafkaSinkParticipant
from onceflow.sinks.kafka.handle import handles_of
from onceflow.sinks.kafka.txn_protocol import end_txn
from onceflow.sinks.kafka.coordinators import describe_transactions, TransactionState
from onceflow.sinks.kafka.markers import open_transactions, OpenTransaction
from onceflow.core.participant import Outcome
from onceflow_devkit.services.kafka_broker import (
    DESCRIBE_TRANSACTIONS,
    HIDES_ABORTED_RECORDS,
    KEEPS_OPEN_TXNS_ON_RESTART,
    LARGE_TRANSACTIONS,
    LSO_FROM_LIST_OFFSETS,
    NAMES_OPEN_TRANSACTIONS,
    REINIT_HIDES_ABORTED,
    STALE_EPOCH_ERRORS,
    WRONG_PID_END_TXN_IS_HARMLESS,
)
from tests.integration.kafka.helpers import (
    batch_value,
    create_topic,
    open_transaction,
    precommit_batch,
    produce_txn,
    read_committed,
)
from tests.support import require


def _pipeline() -> str:
    return f"p-{uuid.uuid4().hex[:6]}"


def _open_split(broker, tmp_path, prefix: str, records: int):
    """One split's transaction left open in a new 2-partition topic: (topic, pipeline, vote, its handle)."""
    topic = create_topic(broker.config(), partitions=2, prefix=prefix)
    pipeline = _pipeline()
    vote = precommit_batch(broker.config(), topic, tmp_path, pipeline, (records,))
    return topic, pipeline, vote, handles_of(vote)[0]


def _participant(broker, pipeline: str, tmp_path) -> KafkaSinkParticipant:
    return KafkaSinkParticipant("out", pipeline, broker.config(), staging_root=str(tmp_path), broker=broker.broker)


def _values(config, topic: str, partitions: int) -> Counter:
    return Counter(v for _, v, _ in read_committed(config, topic, partitions, timeout_s=60))


def _expected(*counts: int) -> Counter:
    return Counter(batch_value(1, split, i) for split, count in enumerate(counts) for i in range(count))


def test_an_open_transaction_survives_a_broker_restart_and_commits(kafka_broker, _brokers, tmp_path):
    require(kafka_broker, KEEPS_OPEN_TXNS_ON_RESTART)
    config = kafka_broker.config()
    topic = create_topic(config, partitions=2, prefix="restart")
    pipeline = _pipeline()
    vote = precommit_batch(config, topic, tmp_path, pipeline, (40, 25))

    broker = _brokers.restart(kafka_broker.name)  # a clean stop, as a rolling upgrade does
    result = _participant(broker, pipeline, tmp_path).commit(vote)

    assert result.outcome is Outcome.DONE and "repaired" not in result.detail, result.detail
    assert _values(config, topic, 2) == _expected(40, 25)


def test_initialising_an_id_aborts_its_open_transaction_and_hides_its_records(kafka_broker, tmp_path):
    require(kafka_broker, REINIT_HIDES_ABORTED)
    config = kafka_broker.config()
    topic = create_topic(config, partitions=2, prefix="reinit")
    vote = precommit_batch(config, topic, tmp_path, _pipeline(), (30,))

    fence_transactional_ids(config, [h.transactional_id for h in handles_of(vote)])

    assert not open_transaction(kafka_broker, topic)  # ended: the last stable offset is the end
    assert read_committed(config, topic, 2) == []


def test_describe_transactions_follows_a_transaction_from_open_to_committed(kafka_broker, tmp_path):
    require(kafka_broker, DESCRIBE_TRANSACTIONS)
    config = kafka_broker.config()
    _, pipeline, vote, split = _open_split(kafka_broker, tmp_path, "describe", 20)
    unused = f"onceflow.never-used-{uuid.uuid4().hex[:6]}"

    before = describe_transactions(config, [split.transactional_id, unused])
    assert _participant(kafka_broker, pipeline, tmp_path).commit(vote).ok
    after = describe_transactions(config, [split.transactional_id])

    assert before[split.transactional_id].is_of(split.producer_id, split.epoch)
    assert before[split.transactional_id].state is TransactionState.ONGOING
    assert before[unused].state is None  # the coordinator keeps nothing for it
    assert after[split.transactional_id].is_of(split.producer_id, split.epoch)
    assert after[split.transactional_id].state is TransactionState.COMPLETE_COMMIT


def test_end_txn_with_a_stale_epoch_is_refused_as_fenced(kafka_broker, tmp_path):
    require(kafka_broker, STALE_EPOCH_ERRORS)
    config = kafka_broker.config()
    _, _, _, split = _open_split(kafka_broker, tmp_path, "stale", 10)
    fence_transactional_ids(config, [split.transactional_id])  # bumps the epoch

    reply = end_txn(config, split.transactional_id, split.producer_id, split.epoch, True, 10,
                    transaction_version=split.transaction_version)

    assert reply.error_name in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), reply


def test_end_txn_with_a_wrong_producer_id_leaves_the_transaction_committable(kafka_broker, tmp_path):
    require(kafka_broker, WRONG_PID_END_TXN_IS_HARMLESS)
    config = kafka_broker.config()
    topic, pipeline, vote, split = _open_split(kafka_broker, tmp_path, "wrongpid", 15)

    wrong = end_txn(config, split.transactional_id, split.producer_id + 7, split.epoch, True, 10,
                    transaction_version=split.transaction_version)
    result = _participant(kafka_broker, pipeline, tmp_path).commit(vote)

    assert wrong.error_name == "INVALID_PRODUCER_ID_MAPPING", wrong
    assert result.outcome is Outcome.DONE, result.detail
    assert _values(config, topic, 2) == _expected(15)


def test_list_offsets_read_committed_answers_the_last_stable_offset(kafka_broker, tmp_path):
    require(kafka_broker, LSO_FROM_LIST_OFFSETS)
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="lso")
    produce_txn(config, topic, [b"c"] * 5, 0, True)  # 5 records and a marker: offsets 0-5
    pipeline = _pipeline()
    vote = precommit_batch(config, topic, tmp_path, pipeline, (7,))  # open from offset 6
    consumer = Consumer({**config, "group.id": f"lso-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed"})
    try:
        def stable() -> int:
            return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]

        while_open = stable()
        assert _participant(kafka_broker, pipeline, tmp_path).commit(vote).ok
        committed = stable()
    finally:
        consumer.close()

    assert while_open == 6
    assert committed == 6 + 7 + 1  # past the commit marker


def test_describe_producers_names_the_transaction_open_in_a_partition_and_its_first_offset(kafka_broker, tmp_path):
    require(kafka_broker, NAMES_OPEN_TRANSACTIONS)
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="holders")
    produce_txn(config, topic, [b"c"] * 5, 0, True)  # 5 records and a marker: offsets 0-5
    [split] = handles_of(precommit_batch(config, topic, tmp_path, _pipeline(), (7,)))  # open from offset 6

    assert open_transactions(config, topic, [0]) == {0: (OpenTransaction(split.producer_id, split.epoch, 6),)}


def test_a_transaction_of_260000_records_in_one_partition_commits_and_reads_back(kafka_broker, tmp_path):
    require(kafka_broker, LARGE_TRANSACTIONS)
    require(kafka_broker, HIDES_ABORTED_RECORDS)
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="large")
    pipeline = _pipeline()
    vote = precommit_batch(config, topic, tmp_path, pipeline, (260_000,))

    result = _participant(kafka_broker, pipeline, tmp_path).commit(vote)

    assert result.outcome is Outcome.DONE, result.detail
    assert sum(_values(config, topic, 1).values()) == 260_000
