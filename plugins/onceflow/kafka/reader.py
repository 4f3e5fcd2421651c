"""Read exactly the planned records ``[start, end)`` of one partition.

Runs on Spark executors (one call per sub-range) or anywhere else. Reads are
``read_committed``: records of open transactions are never returned, records
of aborted transactions and control records (transaction markers) are
skipped by the client. Offsets inside a range are therefore not contiguous,
and the last offsets of a range may be markers or aborted records that are
never delivered: the read ends on the first of

- a record at or beyond ``end`` (discarded),
- a partition-EOF event at or beyond ``end`` (EOF is reported at the last
  stable offset, after the skipped tail),
- the consumer position at or beyond ``end``.

A range that still has not ended after ``timeout_s`` without progress reaches
past the last stable offset (a planning bug, or a transaction left open
upstream): that is an error naming the range, never a short read.

On a broker that does not hide aborted records (Tansu), aborted data is
returned as if committed; tests that rely on hiding require
HIDES_ABORTED_RECORDS.
"""

from __future__ import annotations

import bisect
import itertools
import time
from typing import Any, Iterator, Mapping

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition

from ..protocol.plan import OffsetRange
from .config import consumer_config

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADERS_TYPE),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms")),
    ]
)
READER_GROUP = "onceflow-range-reader"  # never committed to: assign() only


class RangeReadError(RuntimeError):
    """A range could not be read to its end."""


def split_range(rng: OffsetRange, max_records: int) -> list[OffsetRange]:
    """Contiguous sub-ranges of at most ``max_records`` offsets, covering ``rng`` exactly."""
    if max_records < 1:
        raise ValueError(f"max_records must be >= 1, got {max_records}")
    return [
        OffsetRange(rng.topic, rng.partition, s, min(s + max_records, rng.end))
        for s in range(rng.start, rng.end, max_records)
    ]


def read_range(
    config: Mapping[str, Any],
    rng: OffsetRange,
    batch_size: int = 10_000,
    timeout_s: float = 60.0,
) -> Iterator[pa.RecordBatch]:
    """Yield the committed records of ``rng`` as record batches of at most ``batch_size`` rows (SCHEMA)."""
    with RangeReader(config, timeout_s) as reader:
        yield from reader.read(rng, batch_size)


class RangeReader:
    """One read_committed consumer reading range after range (a consumer's start-up costs most).

    Runs on a Spark executor; keep one per task (or per Python worker) and
    call ``read`` for each sub-range it is given. Not thread-safe.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 60.0):
        self.timeout_s = timeout_s
        self._consumer = Consumer(
            consumer_config(
                config,
                READER_GROUP,
                **{"enable.partition.eof": True, "auto.offset.reset": "error", "fetch.wait.max.ms": 100},
            )
        )

    def __enter__(self) -> "RangeReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def read(self, rng: OffsetRange, batch_size: int = 10_000) -> Iterator[pa.RecordBatch]:
        """Yield the committed records of ``rng`` (see the module docstring for how a read ends)."""
        if rng.size == 0:
            return
        self._consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        try:
            yield from _read(self._consumer, rng, batch_size, self.timeout_s)
        finally:
            self._consumer.unassign()


def _read(consumer: Consumer, rng: OffsetRange, batch_size: int, timeout_s: float) -> Iterator[pa.RecordBatch]:
    end = rng.end
    keys: list = []
    values: list = []
    headers: list = []
    offsets: list = []
    stamps: list = []
    deadline = time.monotonic() + timeout_s
    done = False
    while not done:
        messages = consumer.consume(num_messages=batch_size, timeout=0.2)
        records = [m for m in messages if m.error() is None]
        if len(records) != len(messages):
            for m in messages:
                error = m.error()
                if error is None:
                    continue
                if error.code() != KafkaError._PARTITION_EOF:
                    raise RangeReadError(f"reading {_name(rng)} failed: {error}")
                if m.offset() >= end:  # EOF at the last stable offset, past skipped markers/aborted records
                    done = True
        new_offsets = [m.offset() for m in records]
        if new_offsets and new_offsets[-1] >= end:
            cut = bisect.bisect_left(new_offsets, end)
            records, new_offsets = records[:cut], new_offsets[:cut]
            done = True
        offsets += new_offsets
        keys += [m.key() for m in records]
        values += [m.value() for m in records]
        headers += [m.headers() for m in records]
        stamps += [m.timestamp()[1] for m in records]
        if not done:
            position = consumer.position([TopicPartition(rng.topic, rng.partition)])[0].offset
            done = position >= end
        if len(offsets) >= batch_size or (done and offsets):
            while len(offsets) >= batch_size or (done and offsets):
                n = min(batch_size, len(offsets))
                yield _batch(rng.partition, keys[:n], values[:n], headers[:n], offsets[:n], stamps[:n])
                del keys[:n], values[:n], headers[:n], offsets[:n], stamps[:n]
        if messages:
            deadline = time.monotonic() + timeout_s
        elif not done and time.monotonic() > deadline:
            raise RangeReadError(
                f"reading {_name(rng)} made no progress for {timeout_s:.0f}s: the range reaches past the "
                "partition's last stable offset (a transaction left open upstream?). Check the plan and "
                "the open transactions on the input topic"
            )


def _batch(partition: int, keys, values, headers, offsets, stamps) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            _headers_array(headers),
            pa.array([partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(stamps, pa.timestamp("ms")),
        ],
        schema=SCHEMA,
    )


def _headers_array(headers: list) -> pa.Array:
    """list<struct<key, value>> from confluent-kafka's lists of (key, value) tuples.

    Built from flat children: ``pa.array`` on nested tuples costs about ten
    times more and dominated the read path.
    """
    present = [h or () for h in headers]
    names = [k for h in present for k, _ in h]
    values = [v for h in present for _, v in h]
    offsets = pa.array(list(itertools.accumulate((len(h) for h in present), initial=0)), pa.int32())
    items = pa.StructArray.from_arrays(
        [pa.array(names, pa.string()), pa.array(values, pa.binary())], fields=list(HEADERS_TYPE.value_type)
    )
    mask = pa.array([h is None for h in headers]) if None in headers else None
    return pa.ListArray.from_arrays(offsets, items, type=HEADERS_TYPE, mask=mask)


def _name(rng: OffsetRange) -> str:
    return f"{rng.topic}[{rng.partition}] [{rng.start}, {rng.end})"
