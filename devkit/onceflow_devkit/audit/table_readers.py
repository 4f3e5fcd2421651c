"""One Iceberg table read by two engines, pyiceberg and Spark (``services.spark_table_reader``): the
two must see the same table, batch by batch.

Runs where the audit runs. A reader's view is the current snapshot's rows and the table's
snapshots; the views are compared per batch (a row's batch is what ``batch_of`` says, a
snapshot's is its summary's ``onceflow.batch``), so every disagreement names its batch. The audit
checks pyiceberg's view against the input and the ledger; a Spark view equal to it holds every
committed batch's rows once, none of an aborted batch, and one snapshot per batch.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Mapping, Sequence

from onceflow.sinks.iceberg.participant import BATCH_KEY

NO_BATCH = "(none)"  # rows or snapshots no batch of onceflow's names: another writer's
ONCEFLOW_KEYS = "onceflow."  # the summary keys that tie a snapshot to its batch, compared between readers

Row = Mapping[str, Any]


@dataclass(frozen=True)
class TableView:
    reader: str  # the engine and its version, e.g. "Spark 4.1.4"
    rows: Sequence[Row]  # the current snapshot's rows
    snapshots: Sequence[tuple[int, Mapping[str, str]]]  # (snapshot id, summary), oldest first


def plain(value: Any) -> Any:
    """``value`` as the Spark reader hands it back (its JSON): timestamps in ISO 8601, UTC when naive."""
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc).isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (Decimal, bytes)):
        return str(value)
    return value


def pyiceberg_view(table, scanned=None) -> TableView:
    """What pyiceberg reads of ``table`` (a loaded pyiceberg Table); ``scanned``: its rows, if the
    caller scanned them already (a pyarrow Table)."""
    import pyiceberg

    rows = (scanned if scanned is not None else table.scan().to_arrow()).to_pylist()
    return TableView(f"pyiceberg {pyiceberg.__version__}", rows,
                     [(s.snapshot_id, dict(s.summary.additional_properties)) for s in table.metadata.snapshots])


def spark_view(properties: Mapping[str, str], identifier: str, env=None) -> TableView:
    """What Spark reads of table ``identifier`` through the REST catalog of pyiceberg ``properties``."""
    from onceflow_devkit.services.spark_table_reader import read_table

    read = read_table(properties, identifier, env=env)
    return TableView(f"Spark {read.pyspark}", read.rows, [(int(s["snapshot_id"]), s["summary"]) for s in read.snapshots])


def disagreements(first: TableView, second: TableView, batch_of: Callable[[Row], str | None]) -> list[str]:
    """Each batch whose rows or snapshots ``first`` and ``second`` see differently, one line each."""
    found = []
    rows = (_rows_by_batch(first.rows, batch_of), _rows_by_batch(second.rows, batch_of))
    for batch in sorted(rows[0].keys() | rows[1].keys()):
        mine, theirs = rows[0].get(batch, Counter()), rows[1].get(batch, Counter())
        if mine != theirs:
            example = next(iter((mine - theirs) or (theirs - mine)))
            only = first.reader if mine - theirs else second.reader
            found.append(f"batch {batch}: {first.reader} reads {mine.total()} rows, {second.reader} "
                         f"{theirs.total()}; e.g. {dict(example)} only in {only}'s")
    snapshots = (_snapshots_by_batch(first.snapshots), _snapshots_by_batch(second.snapshots))
    for batch in sorted(snapshots[0].keys() | snapshots[1].keys()):
        mine, theirs = snapshots[0].get(batch, []), snapshots[1].get(batch, [])
        if mine != theirs:
            found.append(f"batch {batch}: snapshots {_described(mine)} in {first.reader}, "
                         f"{_described(theirs)} in {second.reader}")
    return found


def _rows_by_batch(rows: Sequence[Row], batch_of: Callable[[Row], str | None]) -> dict[str, Counter]:
    by_batch: dict[str, Counter] = {}
    for row in rows:
        key = tuple(sorted((column, plain(value)) for column, value in row.items()))
        by_batch.setdefault(batch_of(row) or NO_BATCH, Counter())[key] += 1
    return by_batch


def _snapshots_by_batch(snapshots: Sequence[tuple[int, Mapping[str, str]]]) -> dict[str, list]:
    by_batch: dict[str, list] = {}
    for snapshot_id, summary in snapshots:
        ties = tuple(sorted((k, str(v)) for k, v in summary.items() if k.startswith(ONCEFLOW_KEYS)))
        by_batch.setdefault(summary.get(BATCH_KEY) or NO_BATCH, []).append((int(snapshot_id), ties))
    return by_batch


def _described(snapshots: list) -> str:
    return "[" + ", ".join(f"{snapshot_id} {dict(ties)}" for snapshot_id, ties in snapshots) + "]" if snapshots else "none"
