"""What a read_committed reader sees of one split's output: the proof behind every commit.

Runs on an Airflow worker (commit and rollback tasks). EndTxn's answer is
never taken as proof (noida-db answers "no error" to an EndTxn it ignored),
so the sink looks at the data instead: from the split's first offset in each
partition it counts, with a read_committed consumer, the records whose
headers carry this batch and split, until it has seen them all or reached the
partition's end (EOF comes at the last stable offset). A transaction is
atomic in each partition, so when the split's first record is visible at its
recorded offset the whole partition's share is: the scan stops there.

- OPEN: in some partition the last stable offset (as reported with each fetch,
  read from the client's statistics: ListOffsets is wrong on Tansu and no EOF
  comes while fetching past it) has not passed the split's
  first record: its transaction is still open, or its markers are still
  being written.
- COMMITTED: every original record is visible.
- REPAIRED: none of the originals, every record of a repair is visible.
- ABORTED: the transaction ended and nothing of it is visible.
- INCONSISTENT: anything else (partial output): fail loudly.
- UNKNOWN: a partition was neither read to its end nor to the last of the
  split's records before the time ran out (no progress for ``timeout_s``).

This needs a broker that hides aborted records (HIDES_ABORTED_RECORDS); on
one that does not (Tansu) an aborted transaction looks COMMITTED, as it does
to every other reader of that broker.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Any, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from .config import consumer_config
from .offsets import stable_offsets_from_stats
from .writer import BATCH_HEADER, REPAIR_HEADER, SPLIT_HEADER, TxnHandle


class State(enum.Enum):
    OPEN = "open"
    COMMITTED = "committed"
    REPAIRED = "repaired"
    ABORTED = "aborted"
    INCONSISTENT = "inconsistent"
    UNKNOWN = "unknown"  # the scan did not finish in time: decide nothing


@dataclass(frozen=True)
class PartitionView:
    partition: int
    expected: int
    original: int     # visible records of the split's own transaction
    repaired: int     # visible records of a repair
    stable_end: int   # where the scan stopped (the last stable offset when it ended on EOF)
    open: bool        # the last stable offset has not passed the split's first record
    complete: bool = True  # the scan reached EOF or saw every original record


@dataclass(frozen=True)
class SplitView:
    state: State
    partitions: tuple[PartitionView, ...]

    def describe(self) -> str:
        return ", ".join(
            f"p{v.partition}: {v.original} original + {v.repaired} repaired of {v.expected}"
            + (f" (transaction open: stable end {v.stable_end})" if v.open else "")
            for v in self.partitions
        )


def observe(config: Mapping[str, Any], handle: TxnHandle, timeout_s: float = 30.0, from_start: bool = False) -> SplitView:
    """One scan with a consumer of its own; see ``Observer.observe``."""
    with Observer(config, timeout_s) as observer:
        return observer.observe(handle, from_start)


class Observer:
    """One read_committed consumer, reused for the scans of one commit (its start-up costs most)."""

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 30.0):
        self.timeout_s = timeout_s
        self._samples: list[str] = []
        self._consumer = Consumer(
            consumer_config(
                config,
                "onceflow-visibility",
                **{
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": 50,
                    "statistics.interval.ms": 100,
                    "stats_cb": self._samples.append,
                    # Usually one record per partition settles it: do not prefetch whole partitions.
                    # (Not by lowering queued.min.messages: a fetch that brings more than that
                    # pauses all fetching from the broker for fetch.queue.backoff.ms, 1 s, and
                    # Tansu answers with whole record batches whatever this limit says, so each
                    # further partition of a 200,000-record commit took a second to verify.)
                    "max.partition.fetch.bytes": 262_144,
                },
            )
        )

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def observe(self, handle: TxnHandle, from_start: bool = False) -> SplitView:
        """Scan each partition the split wrote to; see the module docstring for the states.

        ``from_start`` scans from each partition's earliest offset instead of
        the split's first offset: use it to confirm ABORTED before acting on
        it (see ``confirm_aborted``).
        """
        if not handle.partitions:
            return SplitView(State.COMMITTED, ())
        try:
            return self._scan(handle, from_start)
        finally:
            self._consumer.unassign()

    def _scan(self, handle: TxnHandle, from_start: bool) -> SplitView:
        consumer, samples, timeout_s = self._consumer, self._samples, self.timeout_s
        batch_header = (BATCH_HEADER, handle.batch_id.encode())
        split_header = (SPLIT_HEADER, str(handle.split).encode())
        pending = {p: w for p, w in handle.partitions.items()}
        counts = {p: [0, 0] for p in handle.partitions}
        stopped: dict[int, tuple[int, bool]] = {}
        consumer.assign(
            [TopicPartition(handle.topic, p, OFFSET_BEGINNING if from_start else w.first_offset) for p, w in pending.items()]
        )
        # A sample already generated may carry the previous scan's stable offsets: skip one.
        samples.clear()
        stale_samples = 1
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            messages = consumer.consume(num_messages=1_000, timeout=0.02)
            if messages:
                deadline = time.monotonic() + timeout_s
            for m in messages:
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
                if not is_repair and m.offset() == pending[p].first_offset:
                    # A transaction is atomic in each partition: its first record visible means all of it is.
                    counts[p][0] = pending[p].count
                else:
                    counts[p][1 if is_repair else 0] += 1
                if counts[p][0] == pending[p].count:
                    # Every original is visible: nothing after it matters.
                    stopped[p] = (m.offset() + 1, False)
                    del pending[p]
                    consumer.incremental_unassign([TopicPartition(handle.topic, p)])
            if len(samples) > stale_samples and not messages:
                # No EOF comes while the fetch offset is past the last stable offset (an open
                # transaction before it): the LSO the broker reports with each fetch tells.
                for p, stable in stable_offsets_from_stats(samples[-1], handle.topic).items():
                    if p in pending and 0 <= stable <= pending[p].first_offset:
                        stopped[p] = (stable, True)
                        del pending[p]
                samples.clear()
                stale_samples = 0
        for p in pending:  # no EOF and no progress: the broker is unreachable or stuck
            position = consumer.position([TopicPartition(handle.topic, p)])[0].offset
            stopped[p] = (position, False)
        views = tuple(
            PartitionView(p, w.count, counts[p][0], counts[p][1], stopped[p][0], stopped[p][1], p not in pending)
            for p, w in sorted(handle.partitions.items())
        )
        return SplitView(_state(views), views)


def _state(views: tuple[PartitionView, ...]) -> State:
    if not all(v.complete for v in views):
        return State.UNKNOWN
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


def confirm_aborted(observer: Observer, handle: TxnHandle, view: SplitView) -> SplitView:
    """Re-observe an ABORTED view from each partition's start before anyone repairs on it.

    noida-db includes in a read_committed fetch the aborted transactions of a
    producer id that ended *before* the fetch offset; a client that starts
    after that abort marker then drops the same producer id's later
    committed records (measured: the records of a fenced zombie's successor
    become invisible to a reader starting at the successor's first offset).
    Reading from the start sees the marker and counts correctly. Only the
    rare ABORTED path pays for the longer scan.
    """
    if view.state is not State.ABORTED:
        return view
    return observer.observe(handle, from_start=True)
