"""Interval batches on a local ledger, over a stand-in log with explicit
record timestamps: boundaries, closing, tiling (I8), late records, replays,
slots of transactional ids and the committed prefix. The same rules against
a real broker, planned from concurrent threads: tests/integration/core/
test_interval_planning.py; through Airflow's backfill: tests/system/e2e/
test_interval_backfill.py."""

from __future__ import annotations

import random

import pytest

from onceflow.core.planning.interval_planner import IntervalPlanner, committed_prefix
from onceflow.core.ledger.storage import open_ledger_storage
from onceflow.core.planning.intervals import Interval, IntervalNotClosed, OffsetsLostError, SlotBusy
from onceflow.core.errors import PlanningError
from onceflow.core.plan import TXN_ID_POOL
from onceflow.core.planning.source import TopicPartition
from onceflow.core.states import BatchState

from onceflow.ops.audit.ranges import tiling_errors
from tests.doubles.helpers import config, prepare_all, world_coordinator

H = 3_600_000
T0 = 400_000 * H  # an hour boundary
P0, P1 = TopicPartition("in", 0), TopicPartition("in", 1)


class StampedLog:
    """Partitions of topic ``in`` whose records carry the given timestamps, all
    committed; answers as Kafka does (first offset stamped >= t, else the end)."""

    def __init__(self, *partitions: list[int]):
        self.stamps = {TopicPartition("in", p): list(ts) for p, ts in enumerate(partitions)}
        self.earliest: dict[TopicPartition, int] = {}

    def append(self, tp: TopicPartition, *stamps: int) -> None:
        self.stamps[tp].extend(stamps)

    def partitions(self, topics):
        return sorted(tp for tp in self.stamps if tp.topic in topics)

    def topic_ids(self, topics):
        return {}

    def earliest_offsets(self, partitions):
        return {tp: self.earliest.get(tp, 0) for tp in partitions}

    def last_stable_offsets(self, partitions):
        return {tp: len(self.stamps[tp]) for tp in partitions}

    def offsets_for_timestamp(self, partitions, timestamp_ms):
        return {tp: next((i for i, t in enumerate(self.stamps[tp]) if t >= timestamp_ms), len(self.stamps[tp]))
                for tp in partitions}


def hours(n: int) -> list[Interval]:
    return [Interval(T0 + i * H, T0 + (i + 1) * H) for i in range(n)]


def every_minute(first_hour: int, last_hour: int, offset_s: int = 0) -> list[int]:
    return [T0 + m * 60_000 + offset_s * 1000 for m in range(first_hour * 60, last_hour * 60)]


class Clock:
    def __init__(self, now: int):
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def pipeline(tmp_path):
    storage = open_ledger_storage(str(tmp_path / "ledger"))
    clock = Clock(T0 + 24 * H)
    coord, world, parts = world_coordinator(storage, clock=clock)
    planner = IntervalPlanner(coord, config(), grace_ms=5 * 60_000, pool=4, clock=clock)
    return coord, parts, planner, clock


def commit(coord, parts, plan) -> None:
    prepare_all(coord, parts, plan)
    coord.commit(plan.batch_seq)


def test_intervals_planned_in_any_order_tile_the_log_and_read_their_own_records(pipeline):
    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 7), every_minute(0, 7, offset_s=30))
    order = hours(6)
    random.Random(7).shuffle(order)
    plans = []
    for interval in order:
        planned = planner.plan(log, interval, run_id=f"run-{interval.start_ms}")
        commit(coord, parts, planned.plan)
        plans.append(planned.plan)
    assert not tiling_errors(plans)
    for plan in plans:
        interval = plan.interval
        for r in plan.ranges:
            stamps = log.stamps[TopicPartition(r.topic, r.partition)][r.start:r.end]
            assert len(stamps) == 60 and all(interval.start_ms <= t < interval.end_ms for t in stamps), (interval, r)
    # Two neighbours read one boundary record: six intervals, seven boundaries.
    assert len(coord.ledger.storage.list(f"{coord.ledger.base}/boundaries")) == 7


def test_an_interval_waits_until_every_partition_has_a_record_at_or_after_its_end(pipeline):
    coord, parts, planner, clock = pipeline
    log = StampedLog(every_minute(0, 2), every_minute(0, 1))  # partition 1 has nothing after hour 0
    clock.now = T0 + H + 60_000
    with pytest.raises(IntervalNotClosed, match=r"in\[1\] \(last stable offset 60\).*interval_grace_s") as waiting:
        planner.plan(log, hours(1)[0], run_id="r1")
    assert waiting.value.waiting == (P1,)
    assert coord.latest_seq() == 0 and coord.ledger.read_boundary(T0 + H) is None  # nothing written while it waits
    log.append(P1, T0 + H + 5_000)  # a record at or after the end closes it
    plan = planner.plan(log, hours(1)[0], run_id="r1").plan
    assert [(r.start, r.end) for r in plan.ranges] == [(0, 60), (0, 60)]


def test_the_grace_period_fixes_an_idle_partition_and_earlier_boundaries_stay_below_it(pipeline):
    coord, parts, planner, clock = pipeline
    log = StampedLog(every_minute(0, 2), every_minute(0, 1))  # nothing at all after hour 1
    late_half = Interval(T0 + 2 * H + H // 2, T0 + 3 * H)
    clock.now = T0 + 3 * H + 60_000
    with pytest.raises(IntervalNotClosed):
        planner.plan(log, late_half, run_id="late-half")
    clock.now = T0 + 3 * H + 5 * 60_000  # interval_grace_s after its end
    late = planner.plan(log, late_half, run_id="late-half").plan
    end = coord.ledger.read_boundary(late_half.end_ms)
    assert (end.how[P0], end.offset(P0), end.how[P1], end.offset(P1)) == ("grace", 120, "grace", 60)
    # Records arriving now, stamped in hour 1 and in hour 2, are after that boundary...
    log.append(P1, T0 + H + 10, T0 + 2 * H + 10)  # offsets 60 and 61
    early = planner.plan(log, Interval(T0 + 2 * H, late_half.start_ms), run_id="early-half").plan
    # ...so the boundary at 2 h resolved now is held down to the later one (Kafka's answer, 61, would overlap).
    start = coord.ledger.read_boundary(T0 + 2 * H)
    assert (start.how[P1], start.offset(P1)) == ("later", 60)
    assert [(r.start, r.end) for r in early.ranges] == [(120, 120), (60, 60)]
    assert not tiling_errors([early, late])


def test_a_late_record_lands_in_exactly_one_interval(pipeline):
    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 3), every_minute(0, 3))
    first, second, third = hours(3)
    done = [planner.plan(log, first, run_id="a").plan]
    log.append(P0, T0 + 10_000)  # stamped in hour 0, which is already planned
    log.append(P0, T0 + 3 * H)  # closes hour 2
    log.append(P1, T0 + 3 * H)
    done += [planner.plan(log, i, run_id=str(i)).plan for i in (third, second)]
    late = len(every_minute(0, 3))  # its offset in partition 0
    holders = [p.interval for p in done for r in p.ranges if r.partition == 0 and r.start <= late < r.end]
    assert holders == [third]
    assert not tiling_errors(done)


def test_a_committed_interval_is_a_no_op_and_an_aborted_one_replays_its_ranges(pipeline):
    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 3), every_minute(0, 3))
    one, two = hours(2)
    committed = planner.plan(log, one, run_id="scheduled").plan
    commit(coord, parts, committed)
    again = planner.plan(log, one, run_id="backfill__1")
    assert again.already_committed and again.plan == committed
    assert planner.plan(log, one, run_id="scheduled").already_committed  # a cleared run too

    aborted = planner.plan(log, two, run_id="r2").plan
    assert planner.plan(log, two, run_id="r2").plan == aborted  # a retry of the plan task
    coord.rollback(aborted.batch_seq, "spark task failed")
    replay = planner.plan(log, two, run_id="r2").plan
    assert replay.batch_seq > aborted.batch_seq and replay.replay_of == aborted.batch_seq
    assert replay.ranges == aborted.ranges and replay.interval == two
    assert coord.ledger.latest_interval_index(two) == 2


def test_a_second_run_of_an_interval_in_flight_presumes_the_first_aborted(pipeline):
    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 2), every_minute(0, 2))
    interval = hours(1)[0]
    first = planner.plan(log, interval, run_id="manual").plan
    second = planner.plan(log, interval, run_id="backfill").plan
    assert coord.describe(first.batch_seq).state is BatchState.ABORTED
    assert second.replay_of == first.batch_seq and second.ranges == first.ranges


def test_batches_in_flight_take_distinct_slots_and_wait_for_a_free_one(pipeline):
    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 6), every_minute(0, 6))
    plans = [planner.plan(log, i, run_id=str(i)).plan for i in hours(5)[:4]]
    ids = [p.sink("events").transactional_ids for p in plans]
    assert len({i for group in ids for i in group}) == 8  # 4 batches x 2 splits, none shared
    assert [p.slot for p in plans] == [1, 2, 3, 0]
    with pytest.raises(SlotBusy, match=r"slot 1 .* held by batch 0000000001 .* batches_in_flight=4"):
        planner.plan(log, hours(5)[4], run_id="fifth")
    commit(coord, parts, plans[0])
    fifth = planner.plan(log, hours(5)[4], run_id="fifth").plan
    assert fifth.slot == 1 and not set(fifth.sink("events").transactional_ids) & {i for group in ids for i in group}


def test_records_deleted_before_they_were_read_fail_the_plan_naming_them(pipeline):
    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 3), every_minute(0, 3))
    second = planner.plan(log, hours(2)[1], run_id="second").plan  # records the boundary at 1 h: offset 60
    coord.rollback(second.batch_seq, "the spark task failed")
    log.earliest[P0] = 75  # retention deleted offsets 0..74
    with pytest.raises(OffsetsLostError, match=r"in\[0\] offsets 0\.\.74"):
        planner.plan(log, hours(1)[0], run_id="first")
    with pytest.raises(OffsetsLostError, match=r"in\[0\] offsets 60\.\.74"):  # the replay's ranges never move to hide it
        planner.plan(log, hours(2)[1], run_id="second")


def test_an_interval_overlapping_one_planned_before_is_refused(pipeline):
    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 3), every_minute(0, 3))
    planner.plan(log, hours(1)[0], run_id="hourly")
    with pytest.raises(PlanningError, match=r"overlaps interval\(s\) .* planned before, so records would be read twice"):
        planner.plan(log, Interval(T0 + H // 2, T0 + H + H // 2), run_id="half-hourly")
    planner.plan(log, Interval(T0 + H, T0 + H + H // 2), run_id="half-hourly")  # aligned: fine


def test_boundaries_recorded_out_of_order_stop_planning_instead_of_reading_twice(pipeline):
    from onceflow.core.planning.intervals import Boundary

    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 4), every_minute(0, 4))
    # As two plan tasks racing with late records could leave them: 2 h above 3 h in partition 0.
    coord.ledger.create_boundary(Boundary(T0 + 2 * H, {P0: 150, P1: 120}))
    coord.ledger.create_boundary(Boundary(T0 + 3 * H, {P0: 140, P1: 180}))
    for interval in (hours(2)[1], Interval(T0 + 3 * H, T0 + 4 * H)):
        with pytest.raises(PlanningError, match=r"recorded at \S+ and \S+ are out of order in in\[0\] \(150 > 140\)"):
            planner.plan(log, interval, run_id=str(interval))
    assert coord.latest_seq() == 0


def test_an_offsets_pipeline_and_an_interval_pipeline_do_not_share_a_ledger(pipeline):
    from tests.doubles.helpers import source

    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 2), every_minute(0, 2))
    planner.plan(log, hours(1)[0], run_id="r")
    with pytest.raises(PlanningError, match="its batches read data intervals"):
        coord.plan_next(source(), config())


def test_the_committed_prefix_stops_at_the_first_interval_not_committed(pipeline):
    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 5), every_minute(0, 5))
    plans = {i: planner.plan(log, i, run_id=str(i)).plan for i in hours(4)}
    first, second, third, fourth = hours(4)
    assert committed_prefix(coord) is None
    for interval in (first, third, fourth):
        commit(coord, parts, plans[interval])
    assert committed_prefix(coord) == plans[first]
    commit(coord, parts, plans[second])
    assert committed_prefix(coord) == plans[fourth]
    assert coord.ledger.read_prefix_hint().batch_seq == plans[fourth].batch_seq


def test_reprocessing_a_committed_interval_replaces_its_batch_and_the_ledger_says_how(pipeline):
    from onceflow.core.planning.intervals import ReprocessRefused

    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 2), every_minute(0, 2))
    interval = hours(1)[0]
    committed = planner.plan(log, interval, run_id="scheduled").plan
    commit(coord, parts, committed)

    def refuse():
        raise ReprocessRefused("events (kafka: out) cannot take back what it published")

    with pytest.raises(ReprocessRefused, match="cannot take back"):
        planner.plan(log, interval, run_id="backfill", reprocess=refuse)
    assert coord.ledger.latest_interval_index(interval) == 1  # refused before anything was written

    how = {"files": "replaced", "events": "republished"}
    replacement = planner.plan(log, interval, run_id="backfill", reprocess=lambda: how).plan
    assert replacement.ranges == committed.ranges and replacement.replay_of is None
    assert (replacement.replaces.batch_seq, replacement.replaces.outputs) == (committed.batch_seq, how)
    assert planner.plan(log, interval, run_id="backfill", reprocess=lambda: how).plan == replacement  # plan task retried
    commit(coord, parts, replacement)
    assert planner.plan(log, interval, run_id="later").already_committed  # no reprocess asked: a no-op again


def test_a_replacement_that_was_aborted_is_replayed_as_a_replacement(pipeline):
    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 2), every_minute(0, 2))
    interval = hours(1)[0]
    committed = planner.plan(log, interval, run_id="scheduled").plan
    commit(coord, parts, committed)
    how = {"files": "replaced", "events": "republished"}
    replacement = planner.plan(log, interval, run_id="backfill", reprocess=lambda: how).plan
    coord.rollback(replacement.batch_seq, "the spark task failed")
    replay = planner.plan(log, interval, run_id="backfill").plan  # e.g. --reprocess-behavior failed
    assert replay.replay_of == replacement.batch_seq
    assert (replay.replaces.batch_seq, replay.replaces.outputs) == (committed.batch_seq, how)


def test_a_smaller_pool_still_waits_for_every_batch_holding_the_same_slot(pipeline):
    coord, parts, planner, clock = pipeline
    log = StampedLog(every_minute(0, 8), every_minute(0, 8))
    plans = [planner.plan(log, i, run_id=str(i)).plan for i in hours(6)[:3]]  # pool 4: slots 1, 2, 3
    commit(coord, parts, plans[2])
    smaller = IntervalPlanner(coord, config(), grace_ms=0, pool=2, clock=clock)
    assert smaller.plan(log, hours(6)[3], run_id="fourth").plan.slot == 0
    # Batch 5 takes slot 1: batch 3 (5 - 2) is finished, but batch 1, planned with 4 slots, holds slot 1.
    with pytest.raises(SlotBusy, match=r"slot 1 .* held by batch 0000000001"):
        smaller.plan(log, hours(6)[4], run_id="fifth")
    commit(coord, parts, plans[0])
    assert smaller.plan(log, hours(6)[4], run_id="fifth").plan.slot == 1


def test_a_batch_waits_for_the_batch_txn_id_pool_before_it_whose_transactional_ids_it_takes(pipeline):
    coord, parts, planner, clock = pipeline
    log = StampedLog(every_minute(0, TXN_ID_POOL + 2), every_minute(0, TXN_ID_POOL + 2))
    wide = IntervalPlanner(coord, config(), grace_ms=0, pool=TXN_ID_POOL + 4, clock=clock)
    plans = [wide.plan(log, i, run_id=str(i)).plan for i in hours(TXN_ID_POOL + 1)[:TXN_ID_POOL]]
    for plan in plans[1:]:
        commit(coord, parts, plan)
    # Batch 17 has a slot of its own, but batch 1, still in flight, holds its transactional ids.
    with pytest.raises(SlotBusy, match=rf"Kafka transactional ids, still held by batch 0000000001 .* at most {TXN_ID_POOL}"):
        wide.plan(log, hours(TXN_ID_POOL + 1)[-1], run_id="last")
    commit(coord, parts, plans[0])
    last = wide.plan(log, hours(TXN_ID_POOL + 1)[-1], run_id="last").plan
    assert last.sink("events").transactional_ids == plans[0].sink("events").transactional_ids


def test_a_slot_held_by_a_decided_batch_is_freed_by_finishing_it(pipeline):
    coord, parts, planner, clock = pipeline
    log = StampedLog(every_minute(0, 8), every_minute(0, 8))
    small = IntervalPlanner(coord, config(), grace_ms=0, pool=1, clock=clock)
    first = small.plan(log, hours(2)[0], run_id="first").plan
    prepare_all(coord, parts, first)
    from onceflow.core import faults

    faults.arm("commit.effect.before", "raise")  # COMMIT decided, then the commit task dies
    try:
        with pytest.raises(faults.InjectedFault):
            coord.commit(first.batch_seq)
    finally:
        faults.disarm()
    assert coord.describe(first.batch_seq).state is BatchState.COMMITTING
    second = small.plan(log, hours(2)[1], run_id="second").plan  # finishes the commit, then takes the slot
    assert coord.describe(first.batch_seq).state is BatchState.COMMITTED and second.slot == 0


def test_the_input_lag_counts_from_the_committed_prefix_or_before_it_from_the_earliest_interval(pipeline):
    from onceflow.core.lag import consumed_to

    coord, parts, planner, _ = pipeline
    log = StampedLog(every_minute(0, 4), every_minute(0, 4))
    later = planner.plan(log, hours(3)[2], run_id="later").plan
    earlier = planner.plan(log, hours(3)[0], run_id="earlier").plan
    assert consumed_to(coord) == {("in", 0): 0, ("in", 1): 0}  # nothing committed: from the earliest interval's start
    commit(coord, parts, later)
    assert consumed_to(coord) == {("in", 0): 0, ("in", 1): 0}  # out of order: the prefix has not moved
    commit(coord, parts, earlier)
    assert consumed_to(coord) == {("in", 0): 60, ("in", 1): 60}  # hour 1 is not planned: the prefix ends at hour 0
