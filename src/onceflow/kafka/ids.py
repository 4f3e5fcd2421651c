"""Derived transactional ids: one per (pipeline, sink, split), never random.

Format (documented, stable: changing it would orphan open transactions)::

    onceflow.<pipeline>.<sink>.<split>            the split's producer
    onceflow.<pipeline>.<sink>.<split>.repair     the split's repair producer

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


def transactional_id(pipeline: str, sink: str, split: int) -> str:
    """The only transactional.id split ``split`` of ``sink`` in ``pipeline`` may use."""
    if isinstance(split, bool) or not isinstance(split, int) or split < 0:
        raise ValueError(f"split must be a non-negative integer, got {split!r}")
    return f"{PREFIX}.{_check('pipeline', pipeline)}.{_check('sink', sink)}.{split}"


def repair_id(txn_id: str) -> str:
    """The id that re-publishes a split's staged copy when its transaction was aborted."""
    return f"{txn_id}.repair"


def transactional_ids(pipeline: str, sink: str, splits: int) -> tuple[str, ...]:
    """Every id a sink with ``splits`` splits may use, in split order (for SinkPlan)."""
    return tuple(transactional_id(pipeline, sink, i) for i in range(splits))
