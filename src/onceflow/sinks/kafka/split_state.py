"""Where a split stands, from what one scan saw of each of its partitions (pure logic).

A transaction is atomic in each partition, so one record per partition decides
a split's share of it: its *probe*, the split's last record there
(``PartitionWrite.last_offset``). ``PartitionShare`` counts one share as a scan
(``visibility.Observer``, on an Airflow worker) reads it; ``state_of`` gives
the split's verdict from its partitions' views:

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
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from onceflow.sinks.kafka.handle import PartitionWrite, TxnHandle, handle_headers


class SplitState(enum.Enum):
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
    state: SplitState
    partitions: tuple[PartitionView, ...]

    def describe(self) -> str:
        return ", ".join(
            f"p{v.partition}: {v.original} original + {v.repaired} repaired of {v.expected}"
            + (f" (transaction open: stable end {v.stable_end})" if v.open else "")
            + (f" ({v.hidden_repairs} repair records past the stable end {v.stable_end})" if v.hidden_repairs else "")
            for v in self.partitions
        )


class PartitionShare:
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
        """A record with this split's headers is visible. True when the share is decided."""
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
        """EOF at ``end`` (the last stable offset). True when the share is decided."""
        if end > self.probe:
            return self._finish(end, open=False)
        self.stable = end
        return False if wait else self._finish(end, open=True)

    def stable_known(self, stable: int, wait: bool) -> bool:
        """The broker reported ``stable`` as the last stable offset. True when the share is decided."""
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


def state_of(views: tuple[PartitionView, ...]) -> SplitState:
    if not all(v.complete for v in views):
        return SplitState.UNKNOWN
    if all(v.original == v.expected and v.repaired == 0 for v in views):
        return SplitState.COMMITTED
    if all(v.original == 0 and v.repaired == v.expected for v in views):
        return SplitState.REPAIRED
    if any(v.open for v in views):
        # Markers are written partition by partition: a commit in flight may show in some only.
        return SplitState.OPEN
    if any(v.original for v in views):
        return SplitState.INCONSISTENT
    if any(v.hidden_repairs and v.repaired < v.expected for v in views):
        # An open transaction holds the last stable offset inside or before a repair: it may be committed.
        return SplitState.HELD_BACK
    if any(v.repaired for v in views):
        return SplitState.INCONSISTENT
    return SplitState.ABORTED
