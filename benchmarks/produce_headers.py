"""What record headers cost confluent-kafka's ``produce()`` call, with no broker in the way.

    .venv/bin/python benchmarks/produce_headers.py [--records 200000] [--rounds 5]

Every record onceflow's split writer produces carries two headers
(``onceflow.batch``, ``onceflow.split``). This times ``--records`` produce
calls (16-byte key, 100-byte value, explicit partition) into a producer whose
broker address refuses connections, so only the client's own work is
measured: without headers, with onceflow's two, and with one header holding
both. Prints the median of ``--rounds`` and the ratios to the call without
headers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from confluent_kafka import Producer

SHAPES = {
    "no headers": None,
    "two headers (onceflow's)": [("onceflow.batch", b"0000000001"), ("onceflow.split", b"3")],
    "one header holding both": [("onceflow", b"0000000001/3")],
}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    keys = [os.urandom(16) for _ in range(args.records)]
    values = [os.urandom(100) for _ in range(args.records)]
    seconds: dict[str, list[float]] = {name: [] for name in SHAPES}
    for _ in range(args.rounds):  # shapes interleaved, so drift hits each alike
        for name, headers in SHAPES.items():
            seconds[name].append(time_calls(keys, values, headers))
    base = statistics.median(seconds["no headers"])
    for name, times in seconds.items():
        median = statistics.median(times)
        print(f"{name:26s} {median:6.3f} s  {median / base:4.2f}x  {median / args.records * 1e6:5.2f} us/record")


if __name__ == "__main__":
    main()
