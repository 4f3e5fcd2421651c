"""Interval batches against a real broker: records produced with explicit
timestamps over six hours, the six hourly intervals planned at the same
moment from six threads (each with its own Kafka client and ledger handle,
as six plan tasks would be), then a late record. Audited by reading the
planned ranges back from Kafka: each interval holds exactly the records
stamped in it, neighbours share their boundary, the late record lands in
exactly one interval. The rules themselves: tests/unit/core/test_intervals.py."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Producer

from onceflow.core.planning.interval_planner import IntervalPlanner
from onceflow.kafka.offsets import KafkaOffsetSource
from onceflow.kafka.reader import read_range
from onceflow.core.ledger.storage import open_ledger_storage
from onceflow.core.planning.intervals import Interval
from onceflow.core.planning.config import PlanConfig

from tests.doubles.helpers import SINKS, kafka_ids, prepare_all, world_coordinator
from tests.integration.kafka.helpers import create_topic

H = 3_600_000
T0 = (int(time.time() * 1000) // H - 10) * H  # ten hours ago, on the hour: well within any retention
PER_HOUR = 20  # records per partition per hour


def produce_at(config_, topic: str, stamps_by_partition: dict[int, list[int]]) -> None:
    producer = Producer(dict(config_))
    for partition, stamps in stamps_by_partition.items():
        for i, stamp in enumerate(stamps):
            producer.produce(topic, value=b"%d" % stamp, partition=partition, timestamp=stamp)
    assert producer.flush(30) == 0


def stamps_in(config_, rng) -> list[int]:
    return [t for batch in read_range(config_, rng, timeout_s=30) for t in batch.column("timestamp").cast("int64").to_pylist()]


def planner_for(ledger_root: str, topic: str):
    """What one plan task holds: its own ledger handle and coordinator."""
    coord, _, parts = world_coordinator(open_ledger_storage(ledger_root))
    config = PlanConfig(topics=(topic,), sinks=SINKS, transactional_ids=kafka_ids)
    return IntervalPlanner(coord, config, grace_ms=0, pool=8), coord, parts


def test_intervals_planned_at_the_same_moment_tile_the_log_and_a_late_record_lands_once(kafka_broker, tmp_path):
    kafka_config = kafka_broker.config()
    topic = create_topic(kafka_config, partitions=2, prefix="intervals")
    spacing = H // PER_HOUR
    produce_at(kafka_config, topic, {p: [T0 + i * spacing + p * 1000 for i in range(6 * PER_HOUR)] for p in (0, 1)})
    produce_at(kafka_config, topic, {p: [T0 + 6 * H + 5] for p in (0, 1)})  # closes the sixth hour
    ledger_root = str(tmp_path / "ledger")
    hours = [Interval(T0 + i * H, T0 + (i + 1) * H) for i in range(6)]

    start_together = threading.Barrier(len(hours))

    def plan_task(interval: Interval):
        planner, coord, parts = planner_for(ledger_root, topic)
        with KafkaOffsetSource(kafka_config) as source:
            start_together.wait(30)
            plan = planner.plan(source, interval, run_id=f"backfill__{interval.start_ms}").plan
        prepare_all(coord, parts, plan)
        coord.commit(plan.batch_seq)
        return plan

    with ThreadPoolExecutor(len(hours)) as pool:
        plans = list(pool.map(plan_task, hours))

    assert sorted(p.batch_seq for p in plans) == list(range(1, 7))
    assert len({p.slot for p in plans}) == 6  # six batches in flight, six slots of ids
    for plan, interval in zip(plans, hours):
        assert plan.interval == interval
        for rng in plan.ranges:
            stamps = stamps_in(kafka_config, rng)
            assert len(stamps) == PER_HOUR, (interval, rng)
            assert all(interval.start_ms <= t < interval.end_ms for t in stamps), (interval, rng, stamps)
    for before, after in zip(plans, plans[1:]):
        assert [r.end for r in before.ranges] == [r.start for r in after.ranges]
    ledger = planner_for(ledger_root, topic)[1].ledger
    assert len(ledger.storage.list(f"{ledger.base}/boundaries")) == 7  # shared by neighbours: 6 intervals, 7 boundaries

    # A record stamped in hour 1 arrives now: after that hour's end boundary, so it
    # is read by the interval whose boundaries enclose its offset, the seventh hour.
    produce_at(kafka_config, topic, {0: [T0 + H + 123]})
    produce_at(kafka_config, topic, {p: [T0 + 7 * H + 5] for p in (0, 1)})
    seventh = Interval(T0 + 6 * H, T0 + 7 * H)
    planner, coord, parts = planner_for(ledger_root, topic)
    with KafkaOffsetSource(kafka_config) as source:
        late = planner.plan(source, seventh, run_id="scheduled__7").plan
        again = [planner.plan(source, i, run_id="backfill-again").already_committed for i in hours]
    assert again == [True] * 6  # committed intervals are no-ops
    holders = [(p.interval, r.partition) for p in [*plans, late] for r in p.ranges
               if T0 + H + 123 in stamps_in(kafka_config, r)]
    assert holders == [(seventh, 0)]
    assert [r.start for r in late.ranges] == [r.end for r in plans[-1].ranges]
