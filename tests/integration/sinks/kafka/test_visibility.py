"""The commit's proof: splits whose records interleave in the same partitions, seen in one scan."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from dataclasses import replace

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from onceflow.core.participant import Vote
from onceflow.sinks.kafka.handle import handles_of
from onceflow.sinks.kafka.txn_protocol import end_txn
from onceflow.sinks.kafka.hidden_repairs import confirm_aborted
from onceflow.sinks.kafka.split_state import SplitState
from onceflow.sinks.kafka.visibility import SEEK_GAP, Observer
from onceflow.sinks.kafka.headers import CURRENT_FORMAT, batch_and_split
from onceflow.sinks.kafka.writer import TransactionalSplitWriter
from onceflow.sinks.kafka.handle import TRANSACTION_VERSION, TxnHandle
from onceflow.sinks.kafka.staged import staged_uri
from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS
from tests.integration.kafka.helpers import create_topic
from tests.support import require

BATCH = "0000000001"
PARTITIONS = 2


def _splits(config, tmp_path, topic: str, turns: int, rows: int, writer_classes=(TransactionalSplitWriter,) * 2) -> list[TxnHandle]:
    """Splits of one batch (one per writer class) writing by turns into the same partitions, all left open."""
    pipeline = f"pipe-{uuid.uuid4().hex[:8]}"
    writers = [
        cls(config, pipeline, "out", BATCH, s, topic, staged_uri(str(tmp_path), pipeline, "out", BATCH, s, 0))
        for s, cls in enumerate(writer_classes)
    ]
    for w in writers:
        w.begin()
    for turn in range(turns):
        for s, w in enumerate(writers):
            keys = [f"k{i}".encode() for i in range(rows)]
            values = [f"{s}-{turn}-{i}".encode() for i in range(rows)]
            w.write_batch(pa.RecordBatch.from_pydict({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}))
            time.sleep(0.15)  # past linger.ms: this turn is on the broker before the next one
    handles = [w.precommit() for w in writers]
    for w in writers:
        w.abandon()
    return handles


def _offsets_by_split(config, topic: str) -> dict[tuple[int, int], list[int]]:
    """(split, partition) -> offsets of its records, read uncommitted (the transactions are open)."""
    consumer = Consumer({**config, "group.id": f"v-{uuid.uuid4().hex[:6]}", "isolation.level": "read_uncommitted",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    offsets: dict[tuple[int, int], list[int]] = defaultdict(list)
    at_end: set[int] = set()
    deadline = time.monotonic() + 20
    while len(at_end) < PARTITIONS and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.2):
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
                continue
            batch, split = batch_and_split(m.headers())
            assert batch == BATCH
            offsets[(int(split), m.partition())].append(m.offset())
    consumer.close()
    assert len(at_end) == PARTITIONS
    return offsets


# Short turns: records interleave. One long turn each: 15,000 records of one split
# between the probes of the two, which the scan skips with a seek.
@pytest.fixture(params=[(3, 40), (1, 30_000)], ids=["interleaved", "one-after-the-other"])
def interleaved(kafka_broker, tmp_path, request):
    config = kafka_broker.config()
    topic = create_topic(config, partitions=PARTITIONS, prefix="vis")
    handles = _splits(config, tmp_path, topic, *request.param)
    return config, handles, _offsets_by_split(config, topic)


def test_handles_record_first_and_last_offset_of_each_split_in_each_partition(interleaved):
    _, handles, offsets = interleaved
    for h in handles:
        for p, write in h.partitions.items():
            mine = offsets[(h.split, p)]
            assert (write.first_offset, write.last_offset, write.count) == (min(mine), max(mine), len(mine))
    # The premise of the tests below: the splits' records interleave, or lie far apart.
    a, b = handles
    assert any(
        a.partitions[p].first_offset < b.partitions[p].first_offset < a.partitions[p].last_offset
        or b.partitions[p].last_offset - a.partitions[p].last_offset > SEEK_GAP
        for p in a.partitions
    )


def test_open_splits_are_open_and_committed_ones_settle_in_one_scan(interleaved):
    config, handles, _ = interleaved
    with Observer(config, timeout_s=15) as observer:
        assert [v.state for v in observer.observe(handles)] == [SplitState.OPEN, SplitState.OPEN]
        for h in handles:
            assert end_txn(config, h.transactional_id, h.producer_id, h.epoch, commit=True, transaction_version=TRANSACTION_VERSION).error_name == "NONE"
        views = observer.observe_until_ended(handles)
    assert [v.state for v in views] == [SplitState.COMMITTED, SplitState.COMMITTED], [v.describe() for v in views]
    assert [sum(pv.original for pv in v.partitions) for v in views] == [h.records for h in handles]


def test_a_committed_and_an_aborted_split_are_told_apart_in_one_scan(kafka_broker, interleaved):
    require(kafka_broker, HIDES_ABORTED_RECORDS)
    config, (committed, aborted), _ = interleaved
    end_txn(config, committed.transactional_id, committed.producer_id, committed.epoch, commit=True, transaction_version=TRANSACTION_VERSION)
    end_txn(config, aborted.transactional_id, aborted.producer_id, aborted.epoch, commit=False, transaction_version=TRANSACTION_VERSION)
    with Observer(config, timeout_s=15) as observer:
        views = confirm_aborted(observer, [committed, aborted], observer.observe_until_ended([committed, aborted]))
        # From each partition's start, every record counted: the same verdicts.
        from_start = observer.observe([committed, aborted], from_start=True)
    assert [v.state for v in views] == [SplitState.COMMITTED, SplitState.ABORTED], [v.describe() for v in views]
    assert [v.state for v in from_start] == [SplitState.COMMITTED, SplitState.ABORTED], [v.describe() for v in from_start]
    assert sum(pv.original for pv in from_start[0].partitions) == committed.records


class _FormatOneWriter(TransactionalSplitWriter):
    """A split writer as onceflow wrote before the onceflow.txn header."""

    record_format = 1


class _FormatTwoWriter(TransactionalSplitWriter):
    """A split writer as onceflow wrote before the one-header format."""

    record_format = 2


def test_splits_pre_committed_by_older_onceflow_versions_settle_beside_a_current_one(kafka_broker, tmp_path):
    """An upgrade between a batch's pre-commit and its commit: each vote's records are found by the headers
    its own version wrote, told by the vote as that version wrote it (no record_format field)."""
    config = kafka_broker.config()
    topic = create_topic(config, partitions=PARTITIONS, prefix="vis")
    old_one, old_two, current = _splits(config, tmp_path, topic, 3, 40, (_FormatOneWriter, _FormatTwoWriter, TransactionalSplitWriter))
    # As those versions wrote the votes: no payload version, no record_format, and format 1 before staged_sha256.
    written = [replace(old_one, staged_sha256="").to_dict(), old_two.to_dict(), current.to_dict()]
    for raw in written[:2]:
        del raw["record_format"]
    as_voted = handles_of(Vote("out", 1, 1, {"handles": written}))
    assert current.record_format == CURRENT_FORMAT != 2
    with Observer(config, timeout_s=15) as observer:
        assert [v.state for v in observer.observe(as_voted)] == [SplitState.OPEN] * 3
        for h in as_voted:
            assert end_txn(config, h.transactional_id, h.producer_id, h.epoch, commit=True, transaction_version=TRANSACTION_VERSION).error_name == "NONE"
        views = observer.observe_until_ended(as_voted)
        from_start = observer.observe(as_voted, from_start=True)
    assert [v.state for v in views] == [SplitState.COMMITTED] * 3, [v.describe() for v in views]
    assert [sum(pv.original for pv in v.partitions) for v in from_start] == [h.records for h in as_voted]
    offsets = _offsets_by_split(config, topic)
    assert sorted(len(v) for v in offsets.values()) == sorted(w.count for h in as_voted for w in h.partitions.values())
