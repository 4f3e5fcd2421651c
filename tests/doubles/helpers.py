"""Building blocks shared by the protocol tests."""

from __future__ import annotations

from onceflow.core.coordinator import Coordinator
from onceflow.core.plan import TXN_ID_POOL, Plan, SinkPlan
from onceflow.core.planning.config import PlanConfig

from tests.doubles.fakes import FakeSource, World, participants

SINKS = (SinkPlan("files", "files", 1), SinkPlan("events", "kafka", 2))


def kafka_ids(pipeline: str, sink: SinkPlan, batch_seq: int) -> tuple[str, ...]:
    """Stand-in for the Kafka sink kind's transactional ids: batches TXN_ID_POOL apart share them."""
    pooled = batch_seq % TXN_ID_POOL
    return tuple(f"onceflow-{pipeline}-{sink.name}-pool{pooled}-{i}" for i in range(sink.splits)) if sink.kind == "kafka" else ()


def config(max_records: int | None = 100, **kw) -> PlanConfig:
    return PlanConfig(topics=("in",), sinks=SINKS, max_records_per_partition=max_records,
                      **{"transactional_ids": kafka_ids, **kw})


def source(*ends: int) -> FakeSource:
    src = FakeSource()
    for partition, end in enumerate(ends or (250, 40)):
        src.add("in", partition, end)
    return src


def world_coordinator(storage, pipeline: str = "pipe", world: World | None = None, **kw):
    world = world or World()
    parts = participants("world", world)
    return Coordinator(storage, pipeline, parts, **kw), world, parts


def prepare_all(coord: Coordinator, parts, plan: Plan) -> int:
    """What the Spark job does: start an attempt, pre-commit every sink, vote."""
    attempt = coord.begin_attempt(plan.batch_seq)
    for participant in parts.values():
        coord.record_vote(plan.batch_seq, attempt, participant.prepare(plan, attempt))
    return attempt


def run_batch(coord: Coordinator, parts, src, cfg=None) -> Plan:
    plan = coord.plan_next(src, cfg or config())
    prepare_all(coord, parts, plan)
    coord.commit(plan.batch_seq)
    return plan
