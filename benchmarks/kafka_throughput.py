"""Kafka throughput: onceflow against plain confluent-kafka, side by side, in one process.

    python benchmarks/kafka_throughput.py [--records N] [--value-bytes B] [--partitions P] [--rounds R]
                                          [--staging s3://BUCKET/PREFIX]

Uses the broker ONCEFLOW_KAFKA_BOOTSTRAP (+ ONCEFLOW_KAFKA_CONFIG) names; for
the embedded one: ``onceflow services up``, then ``set -a; . .onceflow/stack.env; set +a``. Two comparisons, each run alternately R times and
reported as the median:

1. write: a plain transactional producer (init, begin, produce, flush,
   commit) against onceflow's pre-commit (TransactionalSplitWriter with its
   staged copy) plus commit from the handle (KafkaSinkParticipant.commit:
   EndTxn from another client, then verification by reading).
   The delivery guarantees side by side: a plain idempotent producer without a
   transaction (acks=all) against onceflow's at_least_once and none outputs
   (DirectSplitWriter: no transaction, no staged copy; none with acks=1), and
   exactly_once against that same plain producer: the price of each guarantee.
   Where the gap to the raw producer goes: the same exactly_once writer with
   its staged copy left out (``WriterWithoutStagedCopy``, for the
   attribution only: without the copy a repair has nothing to publish).
2. read: a plain read_committed consumer (assign, consume to the end,
   touch each value; and once more keeping key, value, headers, offset and
   timestamp of each record in a list) against ``RangeReader.read`` over
   the same records: once with every field (Arrow record batches of those
   fields plus partition), once asked for the value only, as the first
   plain consumer reads; and value only with one reader per range, all at
   once, as a batch's Spark tasks read their sub-ranges.

The raw producer sends the same records as onceflow (key, value and the two
onceflow headers) from the same Arrow batch. onceflow's commit ends when a
read_committed reader sees the split's records (it verifies by reading); the
raw producer's ends when the broker answers EndTxn, which may be before its
markers are written. So the raw write is also timed until a read_committed
consumer starting at each partition's last record gets it, and reported
beside it.

onceflow's staged copies go to a local temporary directory, or with
``--staging`` to S3 (the endpoint ONCEFLOW_S3_ENDPOINT names; the stack's
own with ``stack.env``), as a deployment whose warehouse is on S3 stages them.

Each timed write ends with one 100 KB allocation (``charge_freed_records``):
glibc merges the small blocks freed with the delivered records at the next
large allocation, and the raw producer would otherwise leave that work
(0.08 s per 200,000 records on noida) to whatever runs after its timer.
Both sides' charges are printed.

Target (benchmarks/README.md's table): write end to end >= 0.9 of the raw
transactional producer. The reads are compared with the raw consumer (the same
fields on both sides) for what they cost; their target is against Spark's own
Kafka source (spark_kafka_source.py).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from onceflow_devkit.services.stack import environment_broker
from onceflow.kafka.admin import delete_topics, ensure_topics
from onceflow.kafka.offsets import KafkaOffsetSource
from onceflow.kafka.reader import FIELDS, READ_FETCH_BYTES, READ_FETCH_SETTINGS, RangeReader
from onceflow.sinks.kafka.participant import KafkaSinkParticipant
from onceflow.sinks.kafka.handle import vote_payload
from onceflow.sinks.kafka.headers import record_headers
from onceflow.sinks.kafka.writer import DirectSplitWriter, TransactionalSplitWriter
from onceflow.sinks.kafka.staged import staged_uri
from onceflow.storage import Storage, storage_for
from onceflow.storage.s3 import S3Storage
from onceflow.config.s3_connection import S3Connection
from onceflow.core.plan import AT_LEAST_ONCE, EXACTLY_ONCE, NO_GUARANTEE
from onceflow.core.participant import Vote
from onceflow.core.plan import OffsetRange

from baseline import PRODUCER_TUNING  # benchmarks/ is the script's directory

WRITE_TARGET = 0.9  # onceflow's end-to-end write / the raw transactional producer's (benchmarks/README.md)


def create_topic(config: dict, partitions: int) -> str:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    ensure_topics(config, [topic], partitions=partitions)
    time.sleep(0.5)
    return topic


def make_batch(records: int, value_bytes: int) -> pa.RecordBatch:
    keys = [f"key-{i:010d}".encode() for i in range(records)]
    pad = b"x" * max(0, value_bytes - 16)
    values = [f"{i:016d}".encode() + pad for i in range(records)]
    return pa.RecordBatch.from_pydict({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})


def charge_freed_records() -> float:
    """Seconds for one 100 KB allocation: the heap work a write left behind.

    librdkafka frees each delivered record and its headers in the thread that
    serves the delivery reports, and glibc parks such small blocks until the
    next large allocation or free in that arena, which merges them all: about
    0.4 us per record. onceflow's writer meets one inside its flush (the
    statistics sample with the producer id is a large block); the raw
    producer meets none before its timer stops. Called at the end of both
    timed writes, it charges each side the work its own records left.
    """
    started = time.perf_counter()
    block = bytearray(100_000)
    del block
    return time.perf_counter() - started


def produce_batch(producer: Producer, topic: str, batch: pa.RecordBatch) -> None:
    """The batch's records as a raw producer sends them: key, value and onceflow's headers."""
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    headers = record_headers("0000000001", 0, "onceflow.bench.out.0")
    produce, poll = producer.produce, producer.poll
    for k, v in zip(keys, values):
        while True:
            try:
                produce(topic, v, k, headers=headers)
                break
            except BufferError:
                poll(0.05)


def raw_write(config: dict, topic: str, batch: pa.RecordBatch) -> tuple[float, float, float]:
    """Seconds until commit_transaction returned, until a read_committed reader sees the records,
    and of these the heap work left by the freed records (``charge_freed_records``).

    The same records on the wire as onceflow's (key, value and onceflow's
    headers), from the same Arrow batch. The second figure is what onceflow's
    commit waits for (it verifies by reading) and the raw producer does not:
    a broker may write its commit markers after answering EndTxn.
    """
    started = time.perf_counter()
    producer = Producer({**config, "transactional.id": f"raw-{uuid.uuid4().hex[:8]}", **PRODUCER_TUNING})
    producer.init_transactions(30)
    producer.begin_transaction()
    produce_batch(producer, topic, batch)
    producer.flush(60)
    freed = charge_freed_records()  # before the untimed look-up below, whose allocations would do it
    asked = time.perf_counter()
    last = last_offsets(config, topic)
    untimed = time.perf_counter() - asked
    producer.commit_transaction(60)
    committed = time.perf_counter() - started - untimed
    wait_until_readable(config, topic, last)
    return committed, time.perf_counter() - started - untimed, freed


def last_offsets(config: dict, topic: str) -> dict[int, int]:
    """Per partition, the offset of the last record written (its transaction still open)."""
    consumer = Consumer({**config, "group.id": "bench-last", "isolation.level": "read_uncommitted"})
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    last = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] - 1 for p in partitions}
    consumer.close()
    return last


def wait_until_readable(config: dict, topic: str, last: dict[int, int], timeout_s: float = 60.0) -> None:
    """Until a read_committed consumer starting at each partition's last record gets it.

    From the last record, as onceflow's verification reads: noida-db answers a
    fetch with the partition read to its end, so a reader starting at offset
    0 would time the download of the whole topic, not the commit.
    """
    consumer = Consumer({**config, "group.id": "bench-visible", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 50, "max.partition.fetch.bytes": 262_144})
    partitions = list(last)
    consumer.assign([TopicPartition(topic, p, offset) for p, offset in last.items()])
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(seen) < len(partitions):
        if time.monotonic() > deadline:
            raise SystemExit(f"raw write: partitions {sorted(set(partitions) - seen)} of {topic} not readable after {timeout_s:.0f}s")
        seen.update(m.partition() for m in consumer.consume(1_000, 0.02) if m.error() is None)
    consumer.close()


def raw_plain_write(config: dict, topic: str, batch: pa.RecordBatch) -> float:
    """Seconds until an idempotent producer without a transaction (acks=all) flushed the same records:
    what an at_least_once output's job does, by hand."""
    started = time.perf_counter()
    producer = Producer({**config, "enable.idempotence": True, "acks": "all", **PRODUCER_TUNING})
    produce_batch(producer, topic, batch)
    if producer.flush(60):
        raise SystemExit("raw plain write: records still undelivered after 60 s")
    charge_freed_records()
    return time.perf_counter() - started


@functools.cache
def staging_storage(root: str) -> Storage:
    """The storage of the staged copies under ``root``: one per run, so no write pays for opening it."""
    if root.startswith("s3://"):
        storage = S3Storage(S3Connection.from_environment())
        bucket = root.removeprefix("s3://").split("/", 1)[0]
        if bucket not in {b["Name"] for b in storage.client.list_buckets().get("Buckets", [])}:
            storage.client.create_bucket(Bucket=bucket)
        return storage
    return storage_for(root)


class WriterWithoutStagedCopy(TransactionalSplitWriter):
    """The exactly_once writer with nothing staged: its transaction, partitions, headers, delivery reports and
    producer id as always, its staged copy an empty stream. Measured only to tell what the copy costs."""

    _stage_rows = DirectSplitWriter._stage_rows  # nothing staged


def onceflow_write(config: dict, topic: str, batch: pa.RecordBatch, staging: str,
                   guarantee: str = EXACTLY_ONCE, writer_class: type = TransactionalSplitWriter) -> tuple[float, float, float]:
    """Seconds for pre-commit + commit, of that the commit alone, and the heap work left (``charge_freed_records``).
    Another ``guarantee`` than exactly_once writes with ``DirectSplitWriter`` (no transaction, nothing staged)."""
    pipeline = f"bench-{uuid.uuid4().hex[:6]}"
    started = time.perf_counter()
    writer = (writer_class if guarantee == EXACTLY_ONCE else functools.partial(DirectSplitWriter, guarantee=guarantee))(
        config, pipeline, "out", "0000000001", 0, topic, staged_uri(staging, pipeline, "out", "0000000001", 0, 0),
        storage=staging_storage(staging),
    )
    writer.begin()
    writer.write_batch(batch)
    handle = writer.precommit()
    writer.abandon()
    participant = KafkaSinkParticipant("out", pipeline, config, staging_root=staging, storage=staging_storage(staging))
    committing = time.perf_counter()
    result = participant.commit(Vote("out", 1, 0, vote_payload([handle]), records=handle.records))
    freed = charge_freed_records()
    ended = time.perf_counter()
    if not result.ok:
        raise SystemExit(f"onceflow commit failed: {result.detail}")
    return ended - started, ended - committing, freed


def raw_read(config: dict, ranges: list[OffsetRange], all_fields: bool = False) -> tuple[float, int]:
    """A plain consumer: touch each value, or (``all_fields``) keep the fields read_range returns.

    It reads as a careful user would, with RangeReader's fetch settings (``READ_FETCH_SETTINGS``, its fetch
    size): it stops at each range's end (its position, or EOF where the range ends at a
    commit marker) and asks for a short wait (librdkafka's ``consume`` waits its whole timeout unless it fills
    the batch).
    """
    started = time.perf_counter()
    kept: list = []
    consumer = Consumer({**config, "group.id": "bench-raw", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "enable.partition.eof": True, **READ_FETCH_SETTINGS,
                         "max.partition.fetch.bytes": READ_FETCH_BYTES})
    consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
    ends = {r.partition: r.end for r in ranges}
    done, count, size = set(), 0, 0
    while len(done) < len(ranges):
        done.update(tp.partition for tp in consumer.position([TopicPartition(r.topic, r.partition) for r in ranges])
                    if tp.offset >= ends[tp.partition])
        for m in consumer.consume(10_000, 0.005):
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    done.add(m.partition())
                continue
            if all_fields:
                kept.append((m.key(), m.value(), m.headers(), m.offset(), m.timestamp()))
            else:
                size += len(m.value())
            count += 1
    consumer.close()
    return time.perf_counter() - started, count


def onceflow_read(config: dict, ranges: list[OffsetRange], fields=FIELDS) -> tuple[float, int]:
    started = time.perf_counter()
    count = 0
    with RangeReader(config, fields=fields) as reader:  # one consumer, range after range (as one Spark task would)
        for rng in ranges:
            for batch in reader.read(rng):
                count += batch.num_rows
    return time.perf_counter() - started, count


def onceflow_read_parallel(config: dict, ranges: list[OffsetRange], fields=FIELDS) -> tuple[float, int]:
    """One RangeReader per range, all at once: as a batch's Spark tasks read (one sub-range each)."""
    def read(rng: OffsetRange) -> int:
        with RangeReader(config, fields=fields) as reader:
            return sum(batch.num_rows for batch in reader.read(rng))

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(ranges)) as pool:
        count = sum(pool.map(read, ranges))
    return time.perf_counter() - started, count


def measure_round(config: dict, batch: pa.RecordBatch, partitions: int, staging: str) -> dict[str, float]:
    """One round of every comparison against the broker ``config`` reaches: seconds per measure, by name
    (``write_raw``, ``write_of``, ``read_raw``, ...: the functions above, whose figures they are)."""
    records = batch.num_rows
    times: dict[str, float] = {}
    raw_topic = create_topic(config, partitions)
    times["write_raw"], times["write_raw_readable"], times["freed_raw"] = raw_write(config, raw_topic, batch)
    topic = create_topic(config, partitions)
    times["write_of"], times["commit_of"], times["freed_of"] = onceflow_write(config, topic, batch, staging)
    unstaged = create_topic(config, partitions)
    times["write_of_unstaged"] = onceflow_write(config, unstaged, batch, staging, writer_class=WriterWithoutStagedCopy)[0]
    weaker = create_topic(config, partitions)
    times["write_raw_plain"] = raw_plain_write(config, weaker, batch)
    times["write_at_least_once"] = onceflow_write(config, weaker, batch, staging, AT_LEAST_ONCE)[0]
    times["write_none"] = onceflow_write(config, weaker, batch, staging, NO_GUARANTEE)[0]
    delete_topics(config, [weaker, unstaged])
    with KafkaOffsetSource(config) as source:
        stable = source.last_stable_offsets(source.partitions([topic]))
        ranges = [OffsetRange(topic, tp.partition, 0, end) for tp, end in stable.items()]
    times["read_raw"], n_raw = raw_read(config, ranges)
    times["read_raw_all"], _ = raw_read(config, ranges, all_fields=True)
    times["read_of"], n_of = onceflow_read(config, ranges)
    times["read_of_value"], n_of_value = onceflow_read(config, ranges, fields=["value"])
    times["read_of_parallel"], n_of_parallel = onceflow_read_parallel(config, ranges, fields=["value"])
    if not n_raw == n_of == n_of_value == n_of_parallel == records:
        raise SystemExit(f"read {n_raw} (raw) / {n_of}, {n_of_value}, {n_of_parallel} (onceflow) records, wrote {records}")
    # noida-db re-saves everything it holds after each write: a growing topic list would
    # slow every later round.
    delete_topics(config, [raw_topic, topic])
    return times


def median_s(rounds: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def rate_rows(rounds: list[dict[str, float]], records: int) -> list[tuple[str, float, float | None]]:
    """(comparison, onceflow's or the baseline's records/s, onceflow / baseline or None for a baseline) of the medians."""
    def rate(key: str) -> float:
        return records / median_s(rounds, key)

    rate_precommit = records / statistics.median(r["write_of"] - r["commit_of"] for r in rounds)
    return [
        ("write: raw transactional producer", rate("write_raw"), None),
        ("write: onceflow pre-commit + commit", rate("write_of"), rate("write_of") / rate("write_raw")),
        ("write: onceflow pre-commit alone", rate_precommit, rate_precommit / rate("write_raw")),
        ("write: onceflow without its staged copy", rate("write_of_unstaged"), rate("write_of_unstaged") / rate("write_raw")),
        ("write: raw producer until readable", rate("write_raw_readable"), None),
        ("write: onceflow vs raw until readable", rate("write_of"), rate("write_of") / rate("write_raw_readable")),
        ("write: raw idempotent producer, no txn", rate("write_raw_plain"), None),
        ("write: onceflow at_least_once", rate("write_at_least_once"), rate("write_at_least_once") / rate("write_raw_plain")),
        ("write: onceflow none (acks=1)", rate("write_none"), rate("write_none") / rate("write_raw_plain")),
        ("write: onceflow exactly_once vs no txn", rate("write_of"), rate("write_of") / rate("write_raw_plain")),
        ("read: raw read_committed consumer", rate("read_raw"), None),
        ("read: onceflow read_range, value only", rate("read_of_value"), rate("read_of_value") / rate("read_raw")),
        ("read: value only, a reader per range", rate("read_of_parallel"), rate("read_of_parallel") / rate("read_raw")),
        ("read: onceflow read_range, all fields", rate("read_of"), rate("read_of") / rate("read_raw")),
        ("read: raw consumer keeping all fields", rate("read_raw_all"), None),
        ("read: onceflow vs raw keeping all fields", rate("read_of"), rate("read_of") / rate("read_raw_all")),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--staging", help="s3://BUCKET/PREFIX: stage the copies on S3 (default: a local temporary directory)")
    args = parser.parse_args(argv)

    broker = environment_broker()
    config = broker.config()
    print(f"broker: {broker.name} at {broker.bootstrap}; {args.records} records of {args.value_bytes} B, "
          f"{args.partitions} partitions, {args.rounds} rounds")
    batch = make_batch(args.records, args.value_bytes)
    with tempfile.TemporaryDirectory() as local_staging:
        staging = args.staging or local_staging
        print(f"staged copies under {staging}")
        rounds = [measure_round(config, batch, args.partitions, staging) for _ in range(args.rounds)]

    rows = rate_rows(rounds, args.records)
    for name, per_s, ratio in rows:
        print(f"{name:40s} {per_s:12,.0f} rec/s" + (f"   ratio {ratio:.2f}" if ratio is not None else ""))
    print(f"commit from the handle (EndTxn + verification by reading): {median_s(rounds, 'commit_of'):.2f} s median; "
          f"raw producer, from commit_transaction's return until readable: "
          f"{statistics.median([r['write_raw_readable'] - r['write_raw'] for r in rounds]):.2f} s median")
    print(f"heap work left by the freed records, charged at the end of each write: raw producer "
          f"{median_s(rounds, 'freed_raw'):.3f} s, onceflow {median_s(rounds, 'freed_of'):.3f} s median")
    write_ratio = rows[1][2]  # end to end against the raw transactional producer
    print(f"target: write >= {WRITE_TARGET} of the raw transactional producer "
          f"({'met' if write_ratio >= WRITE_TARGET else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
