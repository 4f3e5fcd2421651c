"""The range reader returns exactly the committed records of [start, end)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from onceflow.kafka.offsets import KafkaOffsetSource
from onceflow.kafka.reader import SCHEMA, RangeReader, RangeReadError, read_range, split_range
from onceflow.core.plan import OffsetRange
from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS
from tests.integration.kafka.helpers import create_topic, produce_txn
from tests.support import require


def _values(config, rng, batch_size=10_000) -> list[bytes]:
    batches = list(read_range(config, rng, batch_size=batch_size, timeout_s=5))
    assert all(b.schema == SCHEMA for b in batches)
    assert all(b.num_rows <= batch_size for b in batches)
    table = pa.Table.from_batches(batches, schema=SCHEMA)
    offsets = table.column("offset").to_pylist()
    assert offsets == sorted(offsets) and all(rng.start <= o < rng.end for o in offsets)
    assert set(table.column("partition").to_pylist()) <= {rng.partition}
    return table.column("value").to_pylist()


@pytest.fixture
def interleaved(kafka_broker):
    """Partition 0: committed a(5), aborted b(4), committed c(3), aborted d(2); each txn ends in a marker."""
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="interleaved")
    batches = {"a": (5, True), "b": (4, False), "c": (3, True), "d": (2, False)}
    for name, (count, commit) in batches.items():
        produce_txn(config, topic, [f"{name}{i}".encode() for i in range(count)], 0, commit)
    # Offsets: a 0-4, marker 5, b 6-9, marker 10, c 11-13, marker 14, d 15-16, marker 17; end 18.
    return config, topic


def test_reads_exactly_the_committed_records_of_interleaved_transactions(kafka_broker, interleaved):
    require(kafka_broker, HIDES_ABORTED_RECORDS)
    config, topic = interleaved
    committed = [f"a{i}".encode() for i in range(5)] + [f"c{i}".encode() for i in range(3)]
    assert _values(config, OffsetRange(topic, 0, 0, 18)) == committed
    # Ranges whose tail is a commit marker, an aborted transaction, or an abort marker end correctly.
    assert _values(config, OffsetRange(topic, 0, 0, 6)) == committed[:5]
    assert _values(config, OffsetRange(topic, 0, 0, 10)) == committed[:5]
    assert _values(config, OffsetRange(topic, 0, 6, 11)) == []
    assert _values(config, OffsetRange(topic, 0, 12, 18)) == committed[6:]
    # A range that stops inside a transaction returns only its part.
    assert _values(config, OffsetRange(topic, 0, 2, 4)) == committed[2:4]


def test_sub_ranges_together_read_the_whole_range_once(kafka_broker, interleaved):
    require(kafka_broker, HIDES_ABORTED_RECORDS)
    config, topic = interleaved
    whole = OffsetRange(topic, 0, 0, 18)
    parts = split_range(whole, 4)
    assert [(p.start, p.end) for p in parts] == [(0, 4), (4, 8), (8, 12), (12, 16), (16, 18)]
    assert sum((_values(config, p, batch_size=2) for p in parts), []) == _values(config, whole)
    with RangeReader(config, timeout_s=5) as reader:  # one consumer reading range after range
        rows = [v for p in parts for b in reader.read(p, batch_size=3) for v in b.column("value").to_pylist()]
    assert rows == _values(config, whole)


def test_committed_records_of_a_range_arrive_with_key_headers_and_timestamp(kafka_broker):
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="columns")
    from confluent_kafka import Producer

    producer = Producer({**config, "transactional.id": f"cols-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"v", b"k", 0, headers=[("h", b"1")], timestamp=1_700_000_000_000)
    producer.commit_transaction(30)
    [row] = pa.Table.from_batches(list(read_range(config, OffsetRange(topic, 0, 0, 1), timeout_s=5))).to_pylist()
    assert (row["key"], row["value"], row["headers"], row["offset"]) == (b"k", b"v", [{"key": "h", "value": b"1"}], 0)
    assert int(row["timestamp"].timestamp() * 1000) == 1_700_000_000_000


def test_a_reader_asked_for_some_fields_returns_the_same_records_with_only_those(kafka_broker, interleaved):
    require(kafka_broker, HIDES_ABORTED_RECORDS)
    config, topic = interleaved
    rng = OffsetRange(topic, 0, 0, 18)
    full = pa.Table.from_batches(list(read_range(config, rng, timeout_s=5)), schema=SCHEMA)
    # Asked in any order, returned in SCHEMA order; the end of the range is found without offsets asked for.
    batches = list(read_range(config, rng, batch_size=4, timeout_s=5, fields=["value", "partition"]))
    assert all(b.schema.names == ["value", "partition"] and b.num_rows <= 4 for b in batches)
    table = pa.Table.from_batches(batches)
    assert table.to_pydict() == full.select(["value", "partition"]).to_pydict()
    assert table.column("value").to_pylist() == [f"{n}{i}".encode() for n, c in (("a", 5), ("c", 3)) for i in range(c)]


def test_unknown_or_no_fields_fail_naming_the_valid_ones():
    for fields in (["value", "topic"], []):
        with pytest.raises(ValueError, match="choose one or more of key, value, headers, partition, offset, timestamp"):
            RangeReader({"bootstrap.servers": "127.0.0.1:9"}, fields=fields)


def test_a_range_past_the_last_stable_offset_fails_naming_the_range(kafka_broker):
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="pastlso")
    produce_txn(config, topic, [b"x"], 0, True)
    with KafkaOffsetSource(config) as source:
        (stable,) = source.last_stable_offsets(source.partitions([topic])).values()
    with pytest.raises(RangeReadError, match=rf"{topic}\[0\] \[0, {stable + 5}\)"):
        list(read_range(config, OffsetRange(topic, 0, 0, stable + 5), timeout_s=2))


def test_split_range_rejects_nonsense():
    with pytest.raises(ValueError):
        split_range(OffsetRange("t", 0, 0, 10), 0)
    assert split_range(OffsetRange("t", 0, 5, 5), 3) == []


def test_a_range_starting_after_an_aborted_transaction_still_sees_the_same_producers_commits(kafka_broker):
    from onceflow_devkit.services.kafka_broker import FETCH_AFTER_ABORT_SEES_LATER_COMMITS

    require(kafka_broker, FETCH_AFTER_ABORT_SEES_LATER_COMMITS)
    config = kafka_broker.config()
    topic = create_topic(config, partitions=1, prefix="afterabort")
    txn_id = f"same-{topic}"
    produce_txn(config, topic, [b"aborted"] * 3, 0, False, txn_id=txn_id)  # offsets 0-2, abort marker 3
    produce_txn(config, topic, [b"c0", b"c1"], 0, True, txn_id=txn_id)  # offsets 4-5, commit marker 6
    assert _values(config, OffsetRange(topic, 0, 4, 7)) == [b"c0", b"c1"]
