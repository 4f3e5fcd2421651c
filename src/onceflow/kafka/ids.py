"""Derived transactional ids: one per (pipeline, sink, split[, slot]), never random.

Format (documented, stable: changing it would orphan open transactions)::

    onceflow.<pipeline>.<sink>.<split>               the split's producer (offsets pipeline)
    onceflow.<pipeline>.<sink>.slot<k>.<split>       the same, for a batch in slot k (interval pipeline)
    <either>.repair                                  the split's repair producer

An interval pipeline runs batches side by side: each takes a slot of a
bounded pool (``protocol.intervals.slot_of``), so two batches in flight never
share an id and never fence or abort each other's transactions, while the
number of ids a pipeline ever uses stays bounded.

The pipeline is part of every id, so two pipelines never share one and can
never fence each other. Because the ids are derived, the rollback task can
fence every id a plan allows, including those of splits that never voted.
Names follow ``onceflow.names`` (no dots), so the dots stay unambiguous.
"""

from __future__ import annotations

from ..names import check_name
from ..settings import ConfigurationError

PREFIX = "onceflow"
def _check(kind: str, value: str) -> str:
    try:
        return check_name(f"{kind} name", value)
    except ConfigurationError as exc:
        raise ValueError(f"{exc}; it cannot form a transactional.id") from None


def _index(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def transactional_id(pipeline: str, sink: str, split: int, slot: int | None = None) -> str:
    """The only transactional.id split ``split`` of ``sink`` in ``pipeline`` may use (in ``slot``)."""
    base = f"{PREFIX}.{_check('pipeline', pipeline)}.{_check('sink', sink)}"
    if slot is not None:
        base = f"{base}.slot{_index('slot', slot)}"
    return f"{base}.{_index('split', split)}"


def is_split_id(txn_id: str, pipeline: str, sink: str, split: int) -> bool:
    """Is ``txn_id`` one of the ids split ``split`` of ``sink`` in ``pipeline`` may use (in any slot)?"""
    if txn_id == transactional_id(pipeline, sink, split):
        return True
    slot = txn_id.removeprefix(f"{PREFIX}.{pipeline}.{sink}.slot").removesuffix(f".{split}")
    return slot.isdigit() and txn_id == transactional_id(pipeline, sink, split, int(slot))


def repair_id(txn_id: str) -> str:
    """The id that re-publishes a split's staged copy when its transaction was aborted."""
    return f"{txn_id}.repair"


def transactional_ids(pipeline: str, sink: str, splits: int, slot: int | None = None) -> tuple[str, ...]:
    """Every id a sink with ``splits`` splits may use (in ``slot``), in split order (for SinkPlan)."""
    return tuple(transactional_id(pipeline, sink, i, slot) for i in range(splits))
