"""Derived transactional ids: one per (pipeline, sink, split), never random.

Format (documented, stable: changing it would orphan open transactions)::

    onceflow.<pipeline>.<sink>.<split>            the split's producer
    onceflow.<pipeline>.<sink>.<split>.repair     the split's repair producer

The pipeline is part of every id, so two pipelines never share one and can
never fence each other. Because the ids are derived, the rollback task can
fence every id a plan allows, including those of splits that never voted.
Names are restricted to ``[A-Za-z0-9_-]`` so the dots stay unambiguous.
"""

from __future__ import annotations

import re

PREFIX = "onceflow"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


def _check(kind: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(
            f"{kind} name {value!r} cannot form a transactional.id: use 1-100 characters of A-Z, a-z, 0-9, '_' or '-'"
        )
    return value


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
