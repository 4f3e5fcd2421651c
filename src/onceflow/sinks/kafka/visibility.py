"""What a read_committed reader sees of splits' output: the proof behind every commit.

Runs on an Airflow worker (commit and rollback tasks). Neither EndTxn's
answer (noida-db answers "no error" to an EndTxn it ignored) nor the
coordinator's CompleteCommit (docs/brokers.md, "Hanging transactions") is
taken as proof, so the sink looks at the data instead. A transaction is atomic in each
partition, so one record per partition settles a split's share of it: its
*probe*, the split's last record there (``PartitionWrite.last_offset``). The
probe visible means the whole share is; the transaction ended (the last
stable offset passed the probe) without the probe visible means none of it
is, unless a repair re-published it. One consumer reads every partition of
the given splits at once, from the lowest probe, so the commit of a batch
reads each partition once (noida-db answers a fetch with the partition read
to its end whatever the size limits say: every extra start costs a whole
partition).

- OPEN: in some partition the last stable offset (from EOF, or as reported
  with each fetch, read from the client's statistics: ListOffsets is wrong on
  Tansu and no EOF comes while fetching past it) has not passed the probe:
  the transaction is still open, or its markers are still being written, or
  an older open transaction holds the partition back.
- COMMITTED: every original record is visible.
- REPAIRED: none of the originals, every record of a repair is visible.
- ABORTED: the transaction ended and nothing of it is visible, nor hidden:
  no record of a repair lies past the last stable offset either.
- HELD_BACK: the transaction ended and nothing of it is visible, but records
  of a repair lie past the last stable offset, held back by an open
  transaction (the repair's own, or another producer's): read_committed
  cannot yet tell whether that repair committed.
- INCONSISTENT: anything else (partial output): fail loudly.
- UNKNOWN: a partition was neither read past the probe nor decided open
  before the time ran out (no progress for ``timeout_s``).

This needs a broker that hides aborted records (HIDES_ABORTED_RECORDS); on
one that does not (Tansu) an aborted transaction looks COMMITTED, as it does
to every other reader of that broker.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import ASSIGN_ONLY_GROUP, consumer_config
from onceflow.kafka.offsets import stable_offsets_from_stats
from onceflow.sinks.kafka.headers import REPAIR_HEADER
from onceflow.sinks.kafka.writer import PartitionWrite, TxnHandle, handle_headers


SEEK_GAP = 10_000  # records; reading fewer costs less than a seek's fresh fetch


class State(enum.Enum):
    OPEN = "open"
    COMMITTED = "committed"
    REPAIRED = "repaired"
    ABORTED = "aborted"
    HELD_BACK = "aborted, a repair held back"
    INCONSISTENT = "inconsistent"
    UNKNOWN = "unknown"  # the scan did not finish in time: decide nothing


@dataclass(frozen=True)
class PartitionView:
    partition: int
    expected: int
    original: int     # visible records of the split's own transaction
    repaired: int     # visible records of a repair
    stable_end: int   # where the scan stopped (the last stable offset when it ended on EOF)
    open: bool        # the last stable offset has not passed the split's probe
    complete: bool = True  # the scan passed the probe, or knew the partition open
    hidden_repairs: int = 0  # records of a repair past stable_end, committed or not (only ``confirm_aborted`` counts them)


@dataclass(frozen=True)
class SplitView:
    state: State
    partitions: tuple[PartitionView, ...]

    def describe(self) -> str:
        return ", ".join(
            f"p{v.partition}: {v.original} original + {v.repaired} repaired of {v.expected}"
            + (f" (transaction open: stable end {v.stable_end})" if v.open else "")
            + (f" ({v.hidden_repairs} repair records past the stable end {v.stable_end})" if v.hidden_repairs else "")
            for v in self.partitions
        )


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
        self._config = config
        self._samples: list[str] = []
        self._consumer = Consumer(
            consumer_config(
                config,
                **{
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": 50,
                    "statistics.interval.ms": 10,  # an open transaction shows only here: each sample waited for is latency
                    "stats_cb": self._samples.append,
                    # Usually one record per partition settles it: do not prefetch whole partitions.
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
        ``confirm_aborted``).
        """
        return self._scan(handles, from_start=from_start, wait=False)

    def settle(self, handles: Sequence[TxnHandle], quiet_s: float | None = None) -> list[SplitView]:
        """Like ``observe``, but keeps reading while a split is OPEN: for after EndTxn.

        Returns when no split is OPEN, or when nothing new arrived for
        ``quiet_s`` (default ``timeout_s``); a split still OPEN then is reported OPEN.
        """
        return self._scan(handles, from_start=False, wait=True, quiet_s=quiet_s)

    def count_hidden_repairs(self, handles: Sequence[TxnHandle], views: Sequence[SplitView]) -> list[SplitView]:
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
        consumer = Consumer(consumer_config(self._config, **{
            "isolation.level": "read_uncommitted", "enable.partition.eof": True, "fetch.wait.max.ms": 50}))
        try:
            consumer.assign([TopicPartition(t, p, start) for (t, p), start in starts.items()])
            deadline = time.monotonic() + self.timeout_s
            while len(ended) < len(starts) and time.monotonic() < deadline:
                messages = consumer.consume(num_messages=1_000, timeout=0.05)
                if messages:
                    deadline = time.monotonic() + self.timeout_s
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
            counted.append(SplitView(_state(partitions), partitions))
        return counted

    def _scan(self, handles: Sequence[TxnHandle], from_start: bool, wait: bool,
              quiet_s: float | None = None) -> list[SplitView]:
        shares = [[_Share(h, p, w, from_start) for p, w in sorted(h.partitions.items())] for h in handles]
        by_partition: dict[tuple[str, int], list[_Share]] = {}
        for h, split_shares in zip(handles, shares):
            for share in split_shares:
                by_partition.setdefault((h.topic, share.partition), []).append(share)
        if by_partition:
            try:
                self._read(by_partition, from_start, wait, quiet_s or self.timeout_s)
            finally:
                self._consumer.unassign()
        return [SplitView(_state(views), views) for views in (tuple(s.view() for s in ss) for ss in shares)]

    def _read(self, by_partition: dict[tuple[str, int], list["_Share"]], from_start: bool, wait: bool,
              quiet_s: float) -> None:
        consumer, samples = self._consumer, self._samples
        # Per partition, the shares still unsettled, by their headers (several attempts of one split may share them).
        pending: dict[tuple[str, int], dict[tuple, list[_Share]]] = {}
        for tp, shares in by_partition.items():
            for share in shares:
                pending.setdefault(tp, {}).setdefault(share.headers, []).append(share)
        # How many headers identify a split: one per record format among the splits (headers.FORMATS).
        widths = sorted({len(s.headers) for shares in by_partition.values() for s in shares}, reverse=True)

        def settle(tp: tuple[str, int], share: _Share) -> None:
            waiting = pending[tp]
            waiting[share.headers].remove(share)
            if not waiting[share.headers]:
                del waiting[share.headers]
            if not waiting:
                del pending[tp]
                consumer.incremental_unassign([TopicPartition(*tp)])

        consumer.assign(
            [
                TopicPartition(t, p, OFFSET_BEGINNING if from_start else min(s.probe for s in shares))
                for (t, p), shares in by_partition.items()
            ]
        )
        topics = {t for t, _ in by_partition}
        # A sample already generated may carry the previous scan's stable offsets: skip one.
        samples.clear()
        stale_samples = 1
        positions: dict[tuple[str, int], int] = {}  # offset of the latest record read, per partition
        deadline = time.monotonic() + quiet_s
        while pending and time.monotonic() < deadline:
            messages = consumer.consume(num_messages=1_000, timeout=0.02)
            if messages:
                deadline = time.monotonic() + quiet_s
            for m in messages:
                tp = (m.topic(), m.partition())
                error = m.error()
                if error is not None:  # a refusal, even of a partition already settled, names the grant it lacks
                    refusals.check(self._config, error.code(), "reading back what the batch wrote",
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
                            settle(tp, share)
                    continue
                if m.offset() > positions.get(tp, -1):  # records fetched before a seek may still arrive
                    positions[tp] = m.offset()
                headers = m.headers()
                for width in widths if headers else ():
                    for share in list(waiting.get(tuple(headers[:width]), ())):
                        is_repair = len(headers) > width and headers[width][0] == REPAIR_HEADER
                        if share.saw(m.offset(), is_repair):
                            settle(tp, share)
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
                                settle((topic, p), share)
                samples.clear()
                stale_samples = 0
        for waiting in pending.values():
            for shares in waiting.values():
                for share in shares:
                    share.give_up()


    def _skip_to_probes(self, pending: Mapping[tuple[str, int], Mapping[tuple, list["_Share"]]], positions: dict) -> None:
        """Seek past records no unsettled share needs: those before its probe.

        Splits of a batch written by turns leave long runs of settled splits'
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


def _waiting_names(waiting: Mapping[tuple, list["_Share"]]) -> list[str]:
    return sorted({s.split_name for ss in waiting.values() for s in ss})


class _Share:
    """One split's records in one partition, as one scan sees them."""

    def __init__(self, handle: TxnHandle, partition: int, write: PartitionWrite, exact: bool):
        self.partition = partition
        self.write = write
        self.probe = write.last_offset
        self.headers = tuple(handle_headers(handle))  # as the writer put them on each record
        self.split_name = f"{handle.batch_id}/{handle.split}"
        self.exact = exact  # count every original instead of trusting the probe
        self.original = 0
        self.repaired = 0
        self.stop = -1
        self.stable = -1  # the last stable offset last seen while the probe was not passed
        self.open = False
        self.complete = False

    def saw(self, offset: int, is_repair: bool) -> bool:
        """A record with this split's headers is visible. True when the share is settled."""
        if is_repair:
            self.repaired += 1
        elif self.write.first_offset <= offset <= self.write.last_offset:
            # Records with these headers before the first offset are earlier attempts (Tansu shows them).
            self.original += 1
            if offset == self.probe and not self.exact:
                # A transaction is atomic in each partition: its last record visible means all of it is.
                self.original = self.write.count
        if self.original == self.write.count:
            return self._finish(offset + 1, open=False)
        return False

    def reached_end(self, end: int, wait: bool) -> bool:
        """EOF at ``end`` (the last stable offset). True when the share is settled."""
        if end > self.probe:
            return self._finish(end, open=False)
        self.stable = end
        return False if wait else self._finish(end, open=True)

    def stable_known(self, stable: int, wait: bool) -> bool:
        """The broker reported ``stable`` as the last stable offset. True when the share is settled."""
        if 0 <= stable <= self.probe:
            self.stable = stable
            return False if wait else self._finish(stable, open=True)
        return False

    def give_up(self) -> None:
        """Time ran out: open if the broker said so, unknown otherwise."""
        if self.stable >= 0:
            self._finish(self.stable, open=True)
        else:
            self.stop = self.stable

    def _finish(self, stop: int, open: bool) -> bool:
        self.stop, self.open, self.complete = stop, open, True
        return True

    def view(self) -> PartitionView:
        return PartitionView(self.partition, self.write.count, self.original, self.repaired, self.stop, self.open, self.complete)


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
    if any(v.original for v in views):
        return State.INCONSISTENT
    if any(v.hidden_repairs and v.repaired < v.expected for v in views):
        # An open transaction holds the last stable offset inside or before a repair: it may be committed.
        return State.HELD_BACK
    if any(v.repaired for v in views):
        return State.INCONSISTENT
    return State.ABORTED


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
    aborted = [i for i, v in enumerate(views) if v.state in (State.ABORTED, State.INCONSISTENT)]
    if not aborted:
        return list(views)
    again = observer.observe([handles[i] for i in aborted], from_start=True)
    confirmed = list(views)
    for i, view in zip(aborted, again):
        confirmed[i] = view
    suspects = [i for i in aborted if confirmed[i].state in (State.ABORTED, State.INCONSISTENT)]
    if suspects:
        counted = observer.count_hidden_repairs([handles[i] for i in suspects], [confirmed[i] for i in suspects])
        for i, view in zip(suspects, counted):
            confirmed[i] = view
    return confirmed
