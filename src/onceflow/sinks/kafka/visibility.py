"""What a read_committed reader sees of splits' output: the proof behind every commit.

Runs on an Airflow worker (commit and rollback tasks). Neither EndTxn's
answer (noida-db answers "no error" to an EndTxn it ignored) nor the
coordinator's CompleteCommit (docs/brokers.md, "Hanging transactions") is
taken as proof, so the sink looks at the data instead. A transaction is atomic in each
partition, so one record per partition decides a split's share of it: its
*probe*, the split's last record there (``PartitionWrite.last_offset``). The
probe visible means the whole share is; the transaction ended (the last
stable offset passed the probe) without the probe visible means none of it
is, unless a repair re-published it. One consumer reads every partition of
the given splits at once, from the lowest probe, so the commit of a batch
reads each partition once (noida-db answers a fetch with the partition read
to its end whatever the size limits say: every extra start costs a whole
partition).

The verdicts (``split_state.SplitState``) and how a share of a split in one
partition is counted (``split_state.PartitionShare``) are pure logic.

This needs a broker that hides aborted records (HIDES_ABORTED_RECORDS); on
one that does not (Tansu) an aborted transaction looks COMMITTED, as it does
to every other reader of that broker.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import ASSIGN_ONLY_GROUP, consumer_config
from onceflow.kafka.consume import assign, ready
from onceflow.kafka.offsets import stable_offsets_from_stats
from onceflow.sinks.kafka.handle import TxnHandle
from onceflow.sinks.kafka.headers import REPAIR_HEADER
from onceflow.sinks.kafka.split_state import PartitionShare, SplitView, state_of


SEEK_GAP = 10_000  # records; reading fewer costs less than a seek's fresh fetch


def observe(config: Mapping[str, Any], handles: Sequence[TxnHandle], timeout_s: float = 30.0) -> list[SplitView]:
    """One scan with a consumer of its own; see ``Observer.observe``."""
    with Observer(config, timeout_s) as observer:
        return observer.observe(handles)


class Observer:
    """One read_committed consumer, reused for the scans of one commit (its start-up costs most).

    Not thread-safe.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 30.0):
        self.timeout_s = timeout_s
        self.config = config
        self._samples: list[str] = []
        self._looked_up: set[str] = set()  # topics whose metadata this consumer has asked for (consume.assign)
        self._consumer = Consumer(
            consumer_config(
                config,
                **{
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": 50,
                    "statistics.interval.ms": 10,  # an open transaction shows only here: each sample waited for is latency
                    "stats_cb": self._samples.append,
                    # Usually one record per partition decides it: do not prefetch whole partitions.
                    # (Not by lowering queued.min.messages: a fetch that brings more than that
                    # pauses all fetching from the broker for fetch.queue.backoff.ms, 1 s, and
                    # Tansu answers with whole record batches whatever this limit says, so each
                    # further partition of a 200,000-record commit took a second to verify.)
                    "max.partition.fetch.bytes": 262_144,
                    # A broker that ignores the fetch limits (noida-db) overfills the fetch queue
                    # with its first answer; librdkafka then holds the fetch that follows each
                    # seek for this long (default 1 s): a second per seek round of a scan
                    # (measured: 4.3 s -> 1.1 s to check four splits of 240,000 records).
                    "fetch.queue.backoff.ms": 10,
                },
            )
        )

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def observe(self, handles: Sequence[TxnHandle], from_start: bool = False) -> list[SplitView]:
        """Where each split stands now; one view per handle, in order.

        A partition whose last stable offset has not passed a probe is
        reported open at once. ``from_start`` reads each partition from its
        earliest offset and counts every original record instead of trusting
        the probe: use it to confirm ABORTED before acting on it (see
        ``hidden_repairs.confirm_aborted``).
        """
        return self._scan(handles, from_start=from_start, wait=False)

    def observe_until_ended(self, handles: Sequence[TxnHandle], quiet_s: float | None = None) -> list[SplitView]:
        """Like ``observe``, but keeps reading while a split is OPEN: for after EndTxn.

        Returns when no split is OPEN, or when nothing new arrived for
        ``quiet_s`` (default ``timeout_s``); a split still OPEN then is reported OPEN.
        """
        return self._scan(handles, from_start=False, wait=True, quiet_s=quiet_s)

    def _scan(self, handles: Sequence[TxnHandle], from_start: bool, wait: bool,
              quiet_s: float | None = None) -> list[SplitView]:
        shares = [[PartitionShare(h, p, w, from_start) for p, w in sorted(h.partitions.items())] for h in handles]
        by_partition: dict[tuple[str, int], list[PartitionShare]] = {}
        for h, split_shares in zip(handles, shares):
            for share in split_shares:
                by_partition.setdefault((h.topic, share.partition), []).append(share)
        if by_partition:
            try:
                self._read(by_partition, from_start, wait, quiet_s or self.timeout_s)
            finally:
                self._consumer.unassign()
        return [SplitView(state_of(views), views) for views in (tuple(s.view() for s in ss) for ss in shares)]

    def _read(self, by_partition: dict[tuple[str, int], list["PartitionShare"]], from_start: bool, wait: bool,
              quiet_s: float) -> None:
        consumer, samples = self._consumer, self._samples
        # Per partition, the shares still undecided, by their headers (several attempts of one split may share them).
        pending: dict[tuple[str, int], dict[tuple, list[PartitionShare]]] = {}
        for tp, shares in by_partition.items():
            for share in shares:
                pending.setdefault(tp, {}).setdefault(share.headers, []).append(share)
        # How many headers identify a split: one per record format among the splits (headers.FORMATS).
        widths = sorted({len(s.headers) for shares in by_partition.values() for s in shares}, reverse=True)

        def decided(tp: tuple[str, int], share: PartitionShare) -> None:
            waiting = pending[tp]
            waiting[share.headers].remove(share)
            if not waiting[share.headers]:
                del waiting[share.headers]
            if not waiting:
                del pending[tp]
                consumer.incremental_unassign([TopicPartition(*tp)])

        assign(consumer, [
            TopicPartition(t, p, OFFSET_BEGINNING if from_start else min(s.probe for s in shares))
            for (t, p), shares in by_partition.items()
        ], self._looked_up)
        topics = {t for t, _ in by_partition}
        # A sample already generated may carry the previous scan's stable offsets: skip one.
        samples.clear()
        stale_samples = 1
        positions: dict[tuple[str, int], int] = {}  # offset of the latest record read, per partition
        deadline = time.monotonic() + quiet_s
        while pending and time.monotonic() < deadline:
            messages = ready(consumer, 1_000, 0.02)
            if messages:
                deadline = time.monotonic() + quiet_s
            for m in messages:
                tp = (m.topic(), m.partition())
                error = m.error()
                if error is not None:  # a refusal, even of a partition already decided, names the grant it lacks
                    refusals.check(self.config, error.code(), "reading back what the batch wrote",
                                   {Resource.TOPIC: ("READ", tp[0] or ", ".join(sorted(topics))),
                                    Resource.GROUP: ("DESCRIBE", ASSIGN_ONLY_GROUP)})
                waiting = pending.get(tp)
                if waiting is None:
                    continue
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"scanning {tp[0]}[{tp[1]}] for batch/split {', '.join(_waiting_names(waiting))} failed: {error}")
                    for share in [s for ss in waiting.values() for s in ss]:
                        if share.reached_end(m.offset(), wait):
                            decided(tp, share)
                    continue
                if m.offset() > positions.get(tp, -1):  # records fetched before a seek may still arrive
                    positions[tp] = m.offset()
                headers = m.headers()
                for width in widths if headers else ():
                    for share in list(waiting.get(tuple(headers[:width]), ())):
                        is_repair = len(headers) > width and headers[width][0] == REPAIR_HEADER
                        if share.saw(m.offset(), is_repair):
                            decided(tp, share)
            if not from_start:
                self._skip_to_probes(pending, positions)
            if len(samples) > stale_samples and not messages:
                # No EOF comes while the fetch offset is past the last stable offset (an open
                # transaction before it): the last stable offset the broker reports with each fetch tells.
                for topic in topics:
                    for p, stable in stable_offsets_from_stats(samples[-1], topic).items():
                        waiting = pending.get((topic, p), {})
                        for share in [s for ss in waiting.values() for s in ss]:
                            if share.stable_known(stable, wait):
                                decided((topic, p), share)
                samples.clear()
                stale_samples = 0
        for waiting in pending.values():
            for shares in waiting.values():
                for share in shares:
                    share.give_up()


    def _skip_to_probes(self, pending: Mapping[tuple[str, int], Mapping[tuple, list["PartitionShare"]]], positions: dict) -> None:
        """Seek past records no undecided share needs: those before its probe.

        Splits of a batch written by turns leave long runs of decided splits'
        records between probes (Spark runs a stage's tasks a few at a time).
        Only a probe decides a share here; an ABORTED verdict is confirmed
        by a full count from the start anyway.
        """
        for tp, position in list(positions.items()):
            waiting = pending.get(tp)
            if waiting is None:
                del positions[tp]
                continue
            target = min(s.probe for ss in waiting.values() for s in ss)
            if target - position > SEEK_GAP:
                self._consumer.seek(TopicPartition(tp[0], tp[1], target))
                positions[tp] = target - 1


def _waiting_names(waiting: Mapping[tuple, list["PartitionShare"]]) -> list[str]:
    return sorted({s.split_name for ss in waiting.values() for s in ss})
