"""Derived transactional ids: one per (pipeline, sink, batch, split), never random.

Format (documented, stable: a plan records the ids its batch may use)::

    onceflow.<pipeline>.<sink>.b<batch seq>.<split>  the split's producer
    <that>.repair                                    the split's repair producer

    onceflow.<pipeline>.<sink>.<split>               plans of older onceflow versions (offsets pipelines),
    onceflow.<pipeline>.<sink>.slot<k>.<split>       and of interval pipelines (slot k of a bounded pool)

Each batch has ids of its own, so nothing a process does to one batch's ids
reaches another batch: a zombie of batch N (a Spark task paused past its
batch's decision) that calls ``init_transactions``, or a zombie job whose
abort fences its plan's ids, fences only batch N's, which are decided (I5).
Ids shared by consecutive batches could not be made safe: the newest
``init_transactions`` on an id always wins, and a check of the ledger before it
leaves a window. Kafka forgets an idle id after ``transactional.id.expiration.ms``
(7 days by default), so a pipeline's ids at the broker are bounded by its
batches in that time (docs/brokers.md), as Flink's KafkaSink's are.

The pipeline is part of every id, so two pipelines never share one and can
never fence each other. Because the ids are derived, the rollback task can
fence every id a plan allows, including those of splits that never voted.
Names follow ``onceflow.config.names`` (no dots), so the dots stay unambiguous; the prefix every id
of a pipeline begins with is there too, where the Kafka ACLs (``onceflow.kafka.acls``) take it.
"""

from __future__ import annotations

from onceflow.config.names import TRANSACTIONAL_ID_PREFIX as PREFIX, check_name, transactional_id_prefix

pipeline_prefix = transactional_id_prefix  # its name in 0.3 (onceflow.kafka.ids), kept for code written against it
from onceflow.config.settings import ConfigurationError


def _check(kind: str, value: str) -> str:
    try:
        return check_name(f"{kind} name", value)
    except ConfigurationError as exc:
        raise ValueError(f"{exc}; it cannot form a transactional.id") from None


def _index(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return int(value)  # a BatchId spells itself with ten digits; an id spells the number


def transactional_id(pipeline: str, sink: str, split: int, batch: int | None = None, *, slot: int | None = None) -> str:
    """The only transactional.id split ``split`` of ``sink`` in ``pipeline`` may use in batch ``batch``
    (``batch`` None, or ``slot``: the id an older onceflow derived, which its plans still name)."""
    base = f"{transactional_id_prefix(_check('pipeline', pipeline))}{_check('sink', sink)}"
    if batch is not None:
        base = f"{base}.b{_index('batch', batch)}"
    elif slot is not None:
        base = f"{base}.slot{_index('slot', slot)}"
    return f"{base}.{_index('split', split)}"


def is_split_id(txn_id: str, pipeline: str, sink: str, split: int, batch: int) -> bool:
    """Is ``txn_id`` an id split ``split`` of ``sink`` in ``pipeline`` may use in batch ``batch``
    (its own, or one an older onceflow's plan named)?"""
    if txn_id in (transactional_id(pipeline, sink, split, batch), transactional_id(pipeline, sink, split)):
        return True
    slot = txn_id.removeprefix(f"{PREFIX}.{pipeline}.{sink}.slot").removesuffix(f".{split}")
    return slot.isdigit() and txn_id == transactional_id(pipeline, sink, split, slot=int(slot))


def repair_id(txn_id: str) -> str:
    """The id that re-publishes a split's staged copy when its transaction was aborted."""
    return f"{txn_id}.repair"


def transactional_ids(pipeline: str, sink: str, splits: int, batch: int | None = None) -> tuple[str, ...]:
    """Every id a sink with ``splits`` splits may use in batch ``batch``, in split order (for SinkPlan)."""
    return tuple(transactional_id(pipeline, sink, i, batch) for i in range(splits))
