"""Split or skip a batch that keeps failing: ``onceflow split`` and ``onceflow skip``.

The ledger side (checks, the record, the race with the next plan) is
``Coordinator.intervene``; the rules are ``core.planning.interventions``. This
module adds what needs the input log and the warehouse: before a skip is
recorded, every record of the batch's ranges, as a read_committed consumer
sees it (the batch job's own reader), is copied to::

    <warehouse>/_onceflow/<pipeline>/quarantine/<batch id>/<topic>/<partition>-<start>-<end>.parquet

with the range reader's columns (key, value, headers, partition, offset,
timestamp) plus ``topic``; the skip names each file and its record count. A
copy left complete by an interrupted skip is counted again, not rewritten.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq

from onceflow.config.warehouse_layout import quarantine_dir
from onceflow.core.coordinator import wall_clock_ms
from onceflow.core.planning.interventions import Action, Intervention, QuarantinedRange
from onceflow.core.plan import OffsetRange, Plan
from onceflow.kafka.reader import RangeReader, SCHEMA

QUARANTINE_TOPIC_FIELD = pa.field("topic", pa.string())


def quarantine_path(warehouse: str, pipeline: str, plan: Plan, rng: OffsetRange) -> str:
    return f"{quarantine_dir(warehouse, pipeline, plan.batch_id)}/{rng.topic}/{rng.partition}-{rng.start}-{rng.end}.parquet"


def quarantine(runtime, plan: Plan) -> tuple[QuarantinedRange, ...]:
    """Copy every record of ``plan``'s ranges to the pipeline's quarantine; one file per non-empty range."""
    schema = SCHEMA.append(QUARANTINE_TOPIC_FIELD)
    storage = runtime.storage
    copied = []
    with RangeReader(runtime.deployment.kafka.config()) as reader:
        for rng in (r for r in plan.ranges if r.size):
            path = quarantine_path(runtime.deployment.warehouse, runtime.spec.name, plan, rng)
            data = storage.read_bytes(path)
            if data is not None:  # open_write completes a file or leaves none: this one is whole
                copied.append(QuarantinedRange(rng, pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows, path))
                continue
            records = 0
            with storage.open_write(path) as out, pq.ParquetWriter(out, schema) as writer:
                for batch in reader.read(rng):
                    topic = pa.array([rng.topic] * batch.num_rows, pa.string())
                    writer.write_batch(pa.RecordBatch.from_arrays([*batch.columns, topic], schema=schema))
                    records += batch.num_rows
            copied.append(QuarantinedRange(rng, records, path))
    return tuple(copied)


def split_batch(runtime, seq: int, records: int, by: str, reason: str) -> Intervention:
    """Record that the next batch replays at most ``records`` records per partition of aborted batch ``seq``."""
    return runtime.coordinator.intervene(
        Intervention(seq, Action.SPLIT, by, reason, wall_clock_ms(), max_records_per_partition=records))


def skip_batch(runtime, seq: int, by: str, reason: str) -> Intervention:
    """Quarantine aborted batch ``seq``'s input records, then record that the next batch starts after them."""
    coordinator = runtime.coordinator
    skip = Intervention(seq, Action.SKIP, by, reason, wall_clock_ms())  # who and why checked before copying anything
    plan = coordinator.check_intervention(seq)  # and the batch; intervene checks again
    return coordinator.intervene(replace(skip, quarantine=quarantine(runtime, plan)))


