"""Before a repair: is an ABORTED verdict real, and is no repair of the split hidden?

Runs on an Airflow worker (commit and rollback tasks), on the scans of a
``visibility.Observer``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence

from confluent_kafka import Consumer, KafkaError, TopicPartition

from onceflow.kafka.config import consumer_config
from onceflow.kafka.consume import assign, ready
from onceflow.sinks.kafka.handle import TxnHandle, handle_headers
from onceflow.sinks.kafka.headers import REPAIR_HEADER
from onceflow.sinks.kafka.split_state import PartitionView, SplitState, SplitView, state_of
from onceflow.sinks.kafka.visibility import Observer


def confirm_aborted(observer: Observer, handles: Sequence[TxnHandle], views: Sequence[SplitView]) -> list[SplitView]:
    """Re-observe ABORTED and INCONSISTENT views from each partition's start before anyone
    repairs on them or fails the commit.

    noida-db includes in a read_committed fetch the aborted transactions of a
    producer id that ended *before* the fetch offset; a client that starts
    after that abort marker then drops the same producer id's later
    committed records (measured: the records of a fenced zombie's successor
    become invisible to a reader starting at the successor's first offset).
    The scan starts each partition at its lowest probe, so a split can look
    aborted, or aborted in one partition and visible in another where another
    split's probe starts the read before the marker (INCONSISTENT). Reading
    from the start sees the marker and counts every record. Only these rare
    paths pay for the longer scan.

    Then each partition is read past where that scan stopped, with
    read_uncommitted up to the high watermark: a repair there is held back by
    an open transaction (its own, or another producer's: an earlier batch
    still in flight, a zombie, another application) and may be committed.
    Such a split is HELD_BACK, never ABORTED: a repair on that verdict would
    publish the staged copy a second time once the transaction ends.
    """
    aborted = [i for i, v in enumerate(views) if v.state in (SplitState.ABORTED, SplitState.INCONSISTENT)]
    if not aborted:
        return list(views)
    again = observer.observe([handles[i] for i in aborted], from_start=True)
    confirmed = list(views)
    for i, view in zip(aborted, again):
        confirmed[i] = view
    suspects = [i for i in aborted if confirmed[i].state in (SplitState.ABORTED, SplitState.INCONSISTENT)]
    if suspects:
        counted = count_hidden_repairs(observer, [handles[i] for i in suspects], [confirmed[i] for i in suspects])
        for i, view in zip(suspects, counted):
            confirmed[i] = view
    return confirmed


def count_hidden_repairs(observer: Observer, handles: Sequence[TxnHandle], views: Sequence[SplitView]) -> list[SplitView]:
    """``views`` again, with each partition's records of a repair of its split past where the scan stopped.

    Read with read_uncommitted up to the high watermark, on a consumer of
    its own: such a record may be committed (held back by another open
    transaction) or not, but where there is none, no repair was committed
    before this read began. A partition not read to its end in time makes
    the view UNKNOWN.
    """
    starts: dict[tuple[str, int], int] = {}
    wanted: dict[tuple[str, int], list[tuple[tuple, int, PartitionView]]] = {}
    for i, (h, view) in enumerate(zip(handles, views)):
        for v in view.partitions:
            tp = (h.topic, v.partition)
            starts[tp] = min(starts.get(tp, v.stable_end), v.stable_end)
            wanted.setdefault(tp, []).append((tuple(handle_headers(h)), i, v))
    counts: list[dict[int, int]] = [{} for _ in handles]
    ended: set[tuple[str, int]] = set()
    consumer = Consumer(consumer_config(observer.config, **{
        "isolation.level": "read_uncommitted", "enable.partition.eof": True, "fetch.wait.max.ms": 50}))
    try:
        assign(consumer, [TopicPartition(t, p, start) for (t, p), start in starts.items()], looked_up=set())
        deadline = time.monotonic() + observer.timeout_s
        while len(ended) < len(starts) and time.monotonic() < deadline:
            messages = ready(consumer, 1_000, 0.05)
            if messages:
                deadline = time.monotonic() + observer.timeout_s
            for m in messages:
                tp = (m.topic(), m.partition())
                error = m.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {tp[0]}[{tp[1]}] past its last stable offset failed: {error}")
                    ended.add(tp)
                    continue
                headers = m.headers() or []
                for key, i, v in wanted.get(tp, ()):
                    n = len(key)
                    if (m.offset() >= v.stable_end and len(headers) > n and headers[n][0] == REPAIR_HEADER
                            and tuple(headers[:n]) == key):
                        counts[i][v.partition] = counts[i].get(v.partition, 0) + 1
    finally:
        consumer.close()
    counted = []
    for i, (h, view) in enumerate(zip(handles, views)):
        partitions = tuple(replace(v, hidden_repairs=counts[i].get(v.partition, 0),
                                   complete=v.complete and (h.topic, v.partition) in ended) for v in view.partitions)
        counted.append(SplitView(state_of(partitions), partitions))
    return counted

