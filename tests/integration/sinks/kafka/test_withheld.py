"""Records too large for their topic: withheld with the reason, published with the batch, never a poison batch.

Kafka refuses a record over the producer's ``message.max.bytes`` (at once) or
the topic's ``max.message.bytes`` (on delivery), on every replay of the batch.
The writer produces the rest and keeps such records aside; the commit
publishes them under ``_onceflow/<pipeline>/withheld/``; an abort leaves
nothing. Audited on the real topic (read_committed) and the published file.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from onceflow.kafka.admin import topic_setting
from onceflow.sinks.kafka.participant import KafkaSinkParticipant
from onceflow.sinks.kafka.handle import vote_payload
from onceflow.sinks.kafka.withheld import withheld_file
from onceflow.sinks.kafka.writer import TransactionalSplitWriter
from onceflow.sinks.kafka.staged import staged_uri
from onceflow.sinks.kafka.withheld import DEFAULT_MESSAGE_MAX_BYTES, max_record_bytes_of
from onceflow.core.participant import Outcome, Vote
from onceflow.core.plan import Plan, SinkPlan
from onceflow.sinks.kafka.ids import transactional_ids
from tests.integration.kafka.helpers import create_topic, read_committed

PARTITIONS = 2
BIG = DEFAULT_MESSAGE_MAX_BYTES + 200_000  # over librdkafka's default limit: refused at produce()


def _participant(kafka_broker, pipeline, tmp_path) -> KafkaSinkParticipant:
    return KafkaSinkParticipant("out", pipeline, kafka_broker.config(), staging_root=str(tmp_path), broker=kafka_broker.broker)


def rows(values: list[bytes]) -> pa.RecordBatch:
    keys = [f"k{i}".encode() for i in range(len(values))]
    return pa.RecordBatch.from_pydict({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})


def precommit(kafka_broker, pipeline, topic, warehouse, batch_id, batch, max_record_bytes=None):
    writer = TransactionalSplitWriter(kafka_broker.config(), pipeline, "out", batch_id, 0, topic,
                                      staged_uri(str(warehouse), pipeline, "out", batch_id, 0, 1),
                                      max_record_bytes=max_record_bytes)
    writer.begin()
    writer.write_batch(batch)
    return writer.precommit()


def test_a_record_kafka_refuses_is_withheld_and_published_with_the_committed_batch_once(kafka_broker, tmp_path):
    pipeline, topic = f"pipe-{uuid.uuid4().hex[:8]}", create_topic(kafka_broker.config(), PARTITIONS, prefix="big")
    small = [f"small-{i}".encode() for i in range(5)]
    big = b"x" * BIG
    handle = precommit(kafka_broker, pipeline, topic, tmp_path, "0000000001", rows([small[0], big, *small[1:]]))
    assert (handle.records, handle.withheld) == (5, 1)

    participant = _participant(kafka_broker, pipeline, tmp_path)
    vote = Vote("out", 1, 1, vote_payload([handle]), records=handle.records, withheld=handle.withheld)
    assert participant.verify(vote).ok
    result = participant.commit(vote)
    assert result.outcome is Outcome.DONE, result.detail
    assert "1 records too large for the topic withheld" in result.detail
    assert Counter(v for _, v, _ in read_committed(kafka_broker.config(), topic, PARTITIONS)) == Counter(small)

    published = pq.read_table(withheld_file(str(tmp_path), handle)).to_pylist()
    assert [(r["key"], r["value"], r["record_bytes"] > DEFAULT_MESSAGE_MAX_BYTES) for r in published] == [(b"k1", big, True)]
    assert f"larger than the {DEFAULT_MESSAGE_MAX_BYTES} bytes topic {topic!r} takes" in published[0]["reason"]
    # A commit retried (a crash before its done marker) publishes nothing twice, even once staging is gone.
    participant.after_commit(Plan(pipeline, 1, (), ()))
    assert participant.commit(vote).outcome is Outcome.ALREADY_DONE
    assert len(pq.read_table(withheld_file(str(tmp_path), handle))) == 1


def test_an_aborted_batch_publishes_none_of_its_withheld_records(kafka_broker, tmp_path):
    pipeline, topic = f"pipe-{uuid.uuid4().hex[:8]}", create_topic(kafka_broker.config(), PARTITIONS, prefix="big")
    handle = precommit(kafka_broker, pipeline, topic, tmp_path, "0000000001", rows([b"a", b"y" * BIG]))
    assert handle.withheld == 1
    participant = _participant(kafka_broker, pipeline, tmp_path)
    plan = Plan(pipeline, 1, (), (SinkPlan("out", "kafka", 1, transactional_ids(pipeline, "out", 1, 1)),))
    vote = Vote("out", 1, 1, vote_payload([handle]), records=1, withheld=1)
    assert participant.abort(plan, [vote]).ok  # (what an abort does to the topic: test_sink.py)
    assert not (tmp_path / "_onceflow" / pipeline / "withheld").exists()
    assert not (tmp_path / "_onceflow" / pipeline / "kafka-staging" / "out" / "0000000001").exists()


def test_a_topic_with_a_lower_limit_than_the_producer_gets_no_record_or_record_batch_over_it(kafka_broker, tmp_path):
    # The topic's own max.message.bytes refuses on delivery (the transaction can then never commit):
    # the driver reads it and every writer of the sink keeps under it, records and record batches.
    limit = 20_000
    topic = create_topic(kafka_broker.config(), PARTITIONS, prefix="small", topic_config={"max.message.bytes": str(limit)})
    reported = topic_setting(kafka_broker.config(), topic, "max.message.bytes")
    assert reported is not None and int(reported) == limit  # both embedded brokers report it (docs/brokers.md)
    pipeline = f"pipe-{uuid.uuid4().hex[:8]}"
    many = [f"{i:06d}".encode() * 500 for i in range(40)]  # 3,000 bytes each: 40 of them do not fit one batch
    handle = precommit(kafka_broker, pipeline, topic, tmp_path, "0000000001", rows([*many, b"z" * 25_000]),
                       max_record_bytes=max_record_bytes_of(kafka_broker.config(), topic_limit=int(reported)))
    assert (handle.records, handle.withheld) == (40, 1)
    participant = _participant(kafka_broker, pipeline, tmp_path)
    assert participant.commit(Vote("out", 1, 1, vote_payload([handle]), records=40, withheld=1)).ok
    assert Counter(v for _, v, _ in read_committed(kafka_broker.config(), topic, PARTITIONS)) == Counter(many)


def test_a_repair_keeps_to_the_topics_limit_too(kafka_broker, tmp_path):
    # The broker aborts the pre-committed transaction after COMMIT: the repair re-publishes the staged
    # copy with a producer of its own, which must batch under the topic's limit as the writer did.
    from onceflow.sinks.kafka.fencing import fence_transactional_ids
    from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS
    from tests.support import require

    require(kafka_broker, HIDES_ABORTED_RECORDS)  # else the aborted copy stays visible beside the repair
    limit = 20_000
    topic = create_topic(kafka_broker.config(), PARTITIONS, prefix="small", topic_config={"max.message.bytes": str(limit)})
    pipeline = f"pipe-{uuid.uuid4().hex[:8]}"
    many = [f"{i:06d}".encode() * 500 for i in range(40)]
    handle = precommit(kafka_broker, pipeline, topic, tmp_path, "0000000001", rows(many),
                       max_record_bytes=max_record_bytes_of(kafka_broker.config(), topic_limit=limit))
    assert handle.max_record_bytes == limit
    fence_transactional_ids(kafka_broker.config(), [handle.transactional_id])
    participant = _participant(kafka_broker, pipeline, tmp_path)
    result = participant.commit(Vote("out", 1, 1, vote_payload([handle]), records=40))
    assert result.outcome is Outcome.DONE and "repaired from the staged copy" in result.detail, result.detail
    assert Counter(v for _, v, _ in read_committed(kafka_broker.config(), topic, PARTITIONS)) == Counter(many)
