"""A pipeline's outputs as Airflow Assets, and the events that announce a
committed batch.

Each output is an Asset (``onceflow.<pipeline>.<sink>``). The protocol tasks
emit their events through one AssetAlias per pipeline, only for a batch they
saw committed, with what was committed in the event's extra: a downstream DAG
scheduled on an output reads the batch from its triggering events. A task
emits for the batches it finished (a plan's recovery may finish an
earlier run's commit) and the commit task for its run's batch; an aborted
batch announces nothing. A batch finished outside Airflow (``onceflow
recover``), or by a task that died before Airflow recorded its events, has
no task to emit for it: the next run's plan announces it (in its plan task, or its
spark task in a DAG without one). Each task
first reads the alias's recent events (the alias is also every protocol
task's inlet) and announces only batches no event carries yet.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetAlias

from onceflow.sinks import sink_kind
from onceflow.pipeline.spec import PipelineSpec


def asset_uri(spec: PipelineSpec, sink_name: str, warehouse: str) -> str:
    sink = spec.sink(sink_name)
    return sink_kind(sink.kind).asset_uri(sink, warehouse)


def outputs(spec: PipelineSpec, warehouse: str) -> list:
    """The pipeline's outputs as Assets, for the DAGs downstream of them."""
    return [
        Asset(name=f"onceflow.{spec.name}.{s.name}", uri=asset_uri(spec, s.name, warehouse), group="onceflow")
        for s in spec.sinks
    ]


def alias(spec: PipelineSpec):
    """The AssetAlias the protocol tasks emit their output events through."""
    return AssetAlias(name=f"onceflow.{spec.name}", group="onceflow")


def batch_facts(status) -> dict[str, Any]:
    """What a downstream DAG learns of a committed batch (JSON)."""
    return {
        "pipeline": status.pipeline,
        "batch_id": status.batch_id,
        "batch_seq": status.batch_seq,
        "ranges": [r.to_dict() for r in status.plan.ranges],
        "records_in": status.plan.records,
        "records_out": {name: vote.records for name, vote in sorted(status.votes.items())},
        "replay_of": status.plan.replay_of,
    }


def announce(outlet_events, spec: PipelineSpec, warehouse: str, status) -> None:
    """One event per output of the committed batch ``status``, through the pipeline's alias."""
    facts = batch_facts(status)
    events = outlet_events[alias(spec)]
    for asset, sink in zip(outputs(spec, warehouse), spec.sinks):
        events.add(asset, extra={**facts, "output": sink.name})


def announced_batches(inlet_events, spec: PipelineSpec, newest: int = 50) -> set[str]:
    """The batch ids the pipeline's newest ``newest`` output events carry (read through its alias,
    an inlet of the reading task)."""
    events = inlet_events[alias(spec)].ascending(False).limit(newest)
    return {str((event.extra or {}).get("batch_id")) for event in events}
