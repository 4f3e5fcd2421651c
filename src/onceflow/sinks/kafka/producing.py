"""Producing a split's rows, and learning where they went.

Runs on a Spark executor, inside ``writer.TransactionalSplitWriter``. Rows are
produced in tight loops; only a partition's first row of the split and each
batch's last row of a partition ask for a delivery report, whose offsets
become the handle's ``PartitionWrite`` (``SplitDeliveries``). The producer id
and epoch come from librdkafka's statistics (``producer_eos``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from itertools import islice
from typing import Any, Callable

from onceflow.kafka.produce import produce_waiting
from onceflow.sinks.kafka.handle import PartitionWrite


class SplitDeliveries:
    """Per partition, how many records the split produced and the offsets of its first and last."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.errors: list[Any] = []
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}

    def add(self, partitions: list[int]) -> list[int]:
        """Count rows going to ``partitions`` (one per row); the rows that need a delivery report: the
        first row of a partition new to this split, and the last row of every partition among them."""
        n = len(partitions)
        reported = {partitions.index(p) for p in set(partitions) - set(self.counts)}
        backwards = partitions[::-1]
        reported.update(n - 1 - backwards.index(p) for p in set(partitions))
        for p, c in Counter(partitions).items():
            self.counts[p] = self.counts.get(p, 0) + c
        return sorted(reported)

    def on_delivery(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
            return
        p, offset = msg.partition(), msg.offset()
        self._first[p] = min(offset, self._first.get(p, offset))
        self._last[p] = max(offset, self._last.get(p, offset))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def unreported(self) -> list[int]:
        """Partitions written whose first or last offset no delivery report told."""
        return sorted(set(self.counts) - (set(self._first) & set(self._last)))

    def writes(self) -> dict[int, PartitionWrite]:
        return {p: PartitionWrite(self._first[p], c, self._last[p]) for p, c in sorted(self.counts.items())}


def produce_rows(producer: Any, topic: str, values: list, keys: list, partitions: list, headers: list,
                 reported: list[int], on_delivery: Callable) -> None:
    """Every row, the ``reported`` ones (in order) with a delivery report: tight loops between them."""
    start = 0
    for cut in reported:
        _produce_unreported(producer, topic, values, keys, partitions, headers, start, cut)
        produce_waiting(producer, topic, values[cut], keys[cut], partitions[cut], headers=headers[cut],
                        on_delivery=on_delivery)
        start = cut + 1
    _produce_unreported(producer, topic, values, keys, partitions, headers, start, len(values))


def _produce_unreported(producer: Any, topic: str, values, keys, partitions, headers, start: int, stop: int) -> None:
    """Rows [start, stop), none with a delivery report: the loop that costs per record, so it
    walks the columns together and passes no keyword it does not need."""
    produce = producer.produce
    i = start
    while i < stop:
        rows = zip(range(i, stop), islice(values, i, stop), islice(keys, i, stop), islice(partitions, i, stop),
                   islice(headers, i, stop))
        try:
            for i, value, key, partition, row_headers in rows:
                produce(topic, value, key, partition, headers=row_headers)
            i = stop
        except BufferError:  # queue full: row i waits for room, the loop goes on after it
            produce_waiting(producer, topic, values[i], keys[i], partitions[i], headers=headers[i])
            i += 1


def producer_eos(producer: Any, stats: list[str], produced: int, timeout_s: float) -> dict[str, Any] | None:
    """The ``eos`` part of the first statistics sample showing every record delivered (later than the
    flush: ``stats`` is cleared first), with the producer id and epoch; None if none came in time."""
    deadline = time.monotonic() + timeout_s
    stats.clear()
    while time.monotonic() < deadline:
        producer.poll(0.05)
        while stats:
            sample = json.loads(stats.pop(0))
            eos = sample.get("eos", {})
            if eos.get("producer_id", -1) >= 0 and sample.get("msg_cnt", 1) == 0 and sample.get("txmsgs", 0) >= produced:
                return eos
    return None
