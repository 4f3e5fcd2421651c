"""What a read_committed reader sees of one split's output: the proof behind every commit.

Runs on an Airflow worker (commit and rollback tasks). EndTxn's answer is
never taken as proof (noida-db answers "no error" to an EndTxn it ignored),
so the sink looks at the data instead: from the split's first offset in each
partition it counts, with a read_committed consumer, the records whose
headers carry this batch and split, until it has seen them all or reached the
partition's end (EOF comes at the last stable offset).

- OPEN: in some partition the last stable offset has not passed the split's
  first record: its transaction is still open, or its markers are still
  being written.
- COMMITTED: every original record is visible.
- REPAIRED: none of the originals, every record of a repair is visible.
- ABORTED: the transaction ended and nothing of it is visible.
- INCONSISTENT: anything else (partial output): fail loudly.

This needs a broker that hides aborted records (HIDES_ABORTED_RECORDS); on
one that does not (Tansu) an aborted transaction looks COMMITTED, as it does
to every other reader of that broker.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Any, Mapping

from confluent_kafka import Consumer, KafkaError, TopicPartition

from .config import consumer_config
from .writer import BATCH_HEADER, REPAIR_HEADER, SPLIT_HEADER, TxnHandle


class State(enum.Enum):
    OPEN = "open"
    COMMITTED = "committed"
    REPAIRED = "repaired"
    ABORTED = "aborted"
    INCONSISTENT = "inconsistent"


@dataclass(frozen=True)
class PartitionView:
    partition: int
    expected: int
    original: int     # visible records of the split's own transaction
    repaired: int     # visible records of a repair
    stable_end: int   # where the scan stopped (the last stable offset when it ended on EOF)
    open: bool        # the last stable offset has not passed the split's first record


@dataclass(frozen=True)
class SplitView:
    state: State
    partitions: tuple[PartitionView, ...]

    def describe(self) -> str:
        return ", ".join(
            f"p{v.partition}: {v.original} original + {v.repaired} repaired of {v.expected}"
            + (" (transaction open)" if v.open else "")
            for v in self.partitions
        )


def observe(config: Mapping[str, Any], handle: TxnHandle, timeout_s: float = 30.0) -> SplitView:
    """Scan each partition the split wrote to; see the module docstring for the states."""
    if not handle.partitions:
        return SplitView(State.COMMITTED, ())
    batch_header = (BATCH_HEADER, handle.batch_id.encode())
    split_header = (SPLIT_HEADER, str(handle.split).encode())
    consumer = Consumer(
        consumer_config(config, "onceflow-visibility", **{"enable.partition.eof": True, "fetch.wait.max.ms": 50})
    )
    pending = {p: w for p, w in handle.partitions.items()}
    counts = {p: [0, 0] for p in handle.partitions}
    stopped: dict[int, tuple[int, bool]] = {}
    try:
        consumer.assign([TopicPartition(handle.topic, p, w.first_offset) for p, w in pending.items()])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=10_000, timeout=0.2):
                p = m.partition()
                if p not in pending:
                    continue
                error = m.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        stopped[p] = (m.offset(), m.offset() <= pending[p].first_offset)
                        del pending[p]
                        continue
                    raise RuntimeError(f"scanning {handle.topic}[{p}] for batch {handle.batch_id} failed: {error}")
                headers = m.headers()
                if not headers or len(headers) < 2 or headers[0] != batch_header or headers[1] != split_header:
                    continue
                is_repair = len(headers) > 2 and headers[2][0] == REPAIR_HEADER
                counts[p][1 if is_repair else 0] += 1
                if counts[p][0] == pending[p].count:
                    # Every original is visible: nothing after it matters.
                    stopped[p] = (m.offset() + 1, False)
                    del pending[p]
        for p in pending:  # never reached EOF: the partition keeps growing, or the broker is slow
            position = consumer.position([TopicPartition(handle.topic, p)])[0].offset
            stopped[p] = (position, position <= handle.partitions[p].first_offset)
    finally:
        consumer.close()
    views = tuple(
        PartitionView(p, w.count, counts[p][0], counts[p][1], stopped[p][0], stopped[p][1])
        for p, w in sorted(handle.partitions.items())
    )
    return SplitView(_state(views), views)


def _state(views: tuple[PartitionView, ...]) -> State:
    if all(v.original == v.expected and v.repaired == 0 for v in views):
        return State.COMMITTED
    if all(v.original == 0 and v.repaired == v.expected for v in views):
        return State.REPAIRED
    if any(v.open for v in views):
        # Markers are written partition by partition: a commit in flight may show in some only.
        return State.OPEN
    if any(v.original or v.repaired for v in views):
        return State.INCONSISTENT
    return State.ABORTED
