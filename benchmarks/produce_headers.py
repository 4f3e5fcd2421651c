"""What record headers cost: confluent-kafka's ``produce()`` call alone, and a broker storing them.

    .venv/bin/python benchmarks/produce_headers.py [--records 200000] [--rounds 5]
    .venv/bin/python benchmarks/produce_headers.py --broker [--records 950000] [--rounds 5]

Every record onceflow's split writer produces carries its headers
(``onceflow/kafka/headers.py``). Each shape below is timed side by side,
interleaved round by round: no headers, the three headers onceflow wrote
before (record format 2: ``onceflow.batch``, ``onceflow.split``,
``onceflow.txn``), and the one header it writes now (format 3:
``onceflow`` = batch/split/writer digest).

Without ``--broker``: ``--records`` produce calls (16-byte key, 100-byte
value, explicit partition) into a producer whose broker address refuses
connections, so only the client's own work is measured.

With ``--broker`` (the broker ONCEFLOW_KAFKA_BOOTSTRAP names, as the other
benchmarks): two processes at once, as a stage's two Spark tasks on
``local[2]``, each a transactional producer with onceflow's settings writing
half the records into a fresh topic of 4 partitions and committing; timed
from their start until both committed, after the machine is quiet
(``quiet.py``), with the CPU seconds of the producers and of everything else
(the broker) during that time. The topic is deleted after each round.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
import uuid

from confluent_kafka import Producer

from onceflow.sinks.kafka.headers import CURRENT_FORMAT, record_headers
from onceflow.sinks.kafka.ids import transactional_id

from baseline import PRODUCER_TUNING  # benchmarks/ is the script's directory
from quiet import CpuMeter, wait_for_quiet

BATCH, SPLIT, TXN = "0000000001", 3, transactional_id("clickstream_demo", "clicks_enriched", 3)
SHAPES = {
    "no headers": None,
    "three (format 2)": record_headers(BATCH, SPLIT, TXN, 2),
    f"one (format {CURRENT_FORMAT})": record_headers(BATCH, SPLIT, TXN),
}
VALUE_BYTES = 100
PARTITIONS = 4
WRITERS = 2


def make_records(n: int) -> tuple[list[bytes], list[bytes]]:
    return [os.urandom(16) for _ in range(n)], [os.urandom(VALUE_BYTES) for _ in range(n)]


def time_calls(keys: list[bytes], values: list[bytes], headers) -> float:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "message.timeout.ms": 600_000,
                         "queue.buffering.max.messages": 2 * len(values), "queue.buffering.max.kbytes": 2_000_000})
    produce = producer.produce
    started = time.perf_counter()
    if headers is None:
        for key, value in zip(keys, values):
            produce("t", value, key, 1)
    else:
        for key, value in zip(keys, values):
            produce("t", value, key, 1, headers=headers)
    elapsed = time.perf_counter() - started
    producer.purge()
    return elapsed


def write_transaction(config: dict, topic: str, records: int, headers, results) -> None:
    """One writer process: a transaction of ``records`` records over the topic's partitions."""
    keys, values = make_records(records)
    producer = Producer({**config, "transactional.id": f"headers-{uuid.uuid4().hex[:8]}", **PRODUCER_TUNING})
    producer.init_transactions(30)
    producer.begin_transaction()
    produce, poll = producer.produce, producer.poll
    extra = {} if headers is None else {"headers": headers}
    for i, (key, value) in enumerate(zip(keys, values)):
        while True:
            try:
                produce(topic, value, key, i % PARTITIONS, **extra)
                break
            except BufferError:
                poll(0.05)
    producer.flush(60)
    producer.commit_transaction(60)
    results.put(time.process_time())  # every thread's CPU, librdkafka's included


def time_writes(config: dict, records: int, headers) -> tuple[float, float, float]:
    """Seconds until every writer committed, and the CPU seconds of the writers and of the rest."""
    from onceflow.kafka.admin import delete_topics, ensure_topics

    topic = f"headers-{uuid.uuid4().hex[:8]}"
    ensure_topics(config, [topic], partitions=PARTITIONS)
    wait_for_quiet()
    results = multiprocessing.get_context("fork").Queue()
    writers = [multiprocessing.get_context("fork").Process(
        target=write_transaction, args=(config, topic, records // WRITERS, headers, results)) for _ in range(WRITERS)]
    with CpuMeter() as meter:
        started = time.perf_counter()
        for w in writers:
            w.start()
        writers_cpu = sum(results.get(timeout=300) for _ in writers)
        elapsed = time.perf_counter() - started
        for w in writers:
            w.join()
            if w.exitcode:
                raise SystemExit(f"a writer process failed (exit code {w.exitcode})")
    delete_topics(config, [topic])
    return elapsed, writers_cpu, meter.others_s  # joined writers count as the meter's own (cutime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", action="store_true", help="write through the broker ONCEFLOW_KAFKA_BOOTSTRAP names")
    parser.add_argument("--records", type=int, default=None, help="200,000 calls without a broker, 950,000 records with one")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.broker:
        from onceflow_devkit.services.stack import environment_broker

        broker = environment_broker()
        config, records = broker.config(), args.records or 950_000
        print(f"broker: {broker.name} at {broker.bootstrap}; {records} records (16 B key, {VALUE_BYTES} B value) "
              f"by {WRITERS} transactional writers at once, {PARTITIONS} partitions, {args.rounds} rounds")
    else:
        records = args.records or 200_000
        keys, values = make_records(records)
    for name, headers in SHAPES.items():
        size = sum(len(k) + len(v) for k, v in headers or ())
        print(f"{name:18s} {size:3d} bytes of header keys and values a record")
    seconds: dict[str, list[tuple[float, ...]]] = {name: [] for name in SHAPES}
    for _ in range(args.rounds):  # shapes interleaved, so drift hits each alike
        for name, headers in SHAPES.items():
            seconds[name].append(time_writes(config, records, headers) if args.broker
                                 else (time_calls(keys, values, headers),))
    base = statistics.median(s[0] for s in seconds["no headers"])
    for name, times in seconds.items():
        median = statistics.median(s[0] for s in times)
        line = f"{name:18s} {median:6.3f} s  {median / base:4.2f}x  {median / records * 1e6:5.2f} us/record"
        if args.broker:
            line += (f"  (rounds {', '.join(f'{s[0]:.2f}' for s in times)}; CPU s, writers "
                     f"{statistics.median(s[1] for s in times):.2f}, broker and the rest {statistics.median(s[2] for s in times):.2f})")
        print(line, flush=True)


if __name__ == "__main__":
    main()
