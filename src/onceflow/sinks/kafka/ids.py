"""Derived transactional ids: one per (pipeline, sink, split) and place in a bounded pool, never random.

Format (documented, stable: a plan records the ids its batch may use)::

    onceflow.<pipeline>.<sink>.pool<k>.<split>      the split's producer in batch seq, k = seq % TXN_ID_POOL
    <that>.repair                                    the split's repair producer

    onceflow.<pipeline>.<sink>.b<batch seq>.<split>  plans of onceflow 0.4 (an id per batch),
    onceflow.<pipeline>.<sink>.<split>               of older versions (offsets pipelines),
    onceflow.<pipeline>.<sink>.slot<k>.<split>       and of their interval pipelines

A pipeline's ids at the broker are bounded by its shape (``TXN_ID_POOL`` x its
Kafka outputs' splits), not by its batches in ``transactional.id.expiration.ms``:
Flink's KafkaSink pools its ids for the same reason (FLINK-34554). Batch ``seq``
shares ids only with ``seq - TXN_ID_POOL`` (and earlier), which the planners
finish before they plan ``seq`` (I5). What a process does to a finished
batch's ids reaches a later batch only from a zombie (a Spark task, a job's
abort or a task paused past its batch's decision and resumed 16 batches later,
while one holds the id), and costs that batch at most one replay or repair,
never a record (docs/brokers.md lists the traps and the tests that spring them).

The pipeline is part of every id, so two pipelines never share one and can
never fence each other. Because the ids are derived, the rollback task can
fence every id a plan allows, including those of splits that never voted.
Names follow ``onceflow.config.names`` (no dots), so the dots stay unambiguous; the prefix every id
of a pipeline begins with is there too, where the Kafka ACLs (``onceflow.kafka.acls``) take it.
"""

from __future__ import annotations

from onceflow.config.names import TRANSACTIONAL_ID_PREFIX as PREFIX, check_name, transactional_id_prefix
from onceflow.config.settings import ConfigurationError
from onceflow.core.plan import TXN_ID_POOL

pipeline_prefix = transactional_id_prefix  # its name in 0.3 (onceflow.kafka.ids), kept for code written against it


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
    """An id an older onceflow derived for split ``split`` of ``sink`` in ``pipeline``, which its
    plans still name: ``batch`` (0.4: an id per batch), ``slot`` (interval pipelines), or neither."""
    base = f"{transactional_id_prefix(_check('pipeline', pipeline))}{_check('sink', sink)}"
    if batch is not None:
        base = f"{base}.b{_index('batch', batch)}"
    elif slot is not None:
        base = f"{base}.slot{_index('slot', slot)}"
    return f"{base}.{_index('split', split)}"


def pooled_id(pipeline: str, sink: str, split: int, batch: int) -> str:
    """The only transactional.id split ``split`` of ``sink`` in ``pipeline`` may use in batch ``batch``."""
    pool_index = _index("batch", batch) % TXN_ID_POOL
    return f"{transactional_id_prefix(_check('pipeline', pipeline))}{_check('sink', sink)}.pool{pool_index}.{_index('split', split)}"


def own_ids(pipeline: str, sink: str, split: int, batch: int) -> tuple[str, str]:
    """The ids split ``split`` of batch ``batch`` may use that no batch still in flight shares: its
    pooled id, and its id per batch (plans of 0.4). Only these may a commit fence."""
    return pooled_id(pipeline, sink, split, batch), transactional_id(pipeline, sink, split, batch)


def is_split_id(txn_id: str, pipeline: str, sink: str, split: int, batch: int) -> bool:
    """Is ``txn_id`` an id split ``split`` of ``sink`` in ``pipeline`` may use in batch ``batch``
    (its own, or one an older onceflow's plan named)?"""
    if txn_id in (*own_ids(pipeline, sink, split, batch), transactional_id(pipeline, sink, split)):
        return True
    slot = txn_id.removeprefix(f"{PREFIX}.{pipeline}.{sink}.slot").removesuffix(f".{split}")
    return slot.isdigit() and txn_id == transactional_id(pipeline, sink, split, slot=int(slot))


def repair_id(txn_id: str) -> str:
    """The id that re-publishes a split's staged copy when its transaction was aborted."""
    return f"{txn_id}.repair"


def transactional_ids(pipeline: str, sink: str, splits: int, batch: int) -> tuple[str, ...]:
    """Every id a sink with ``splits`` splits may use in batch ``batch``, in split order (for SinkPlan)."""
    return tuple(pooled_id(pipeline, sink, i, batch) for i in range(splits))
