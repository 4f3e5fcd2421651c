"""Planning rules (pure): where each batch starts and ends (I1, I6)."""

from __future__ import annotations

import pytest

from onceflow.core.plan import OffsetRange, Plan
from onceflow.core.errors import OffsetsLostError, PlanningError
from onceflow.core.planning.config import PlanConfig, StartPosition
from onceflow.core.planning.offsets import next_plan
from onceflow.core.states import BatchState
from onceflow.config.settings import ConfigurationError

from tests.doubles.fakes import FakeSource
from tests.doubles.helpers import SINKS


def plan_after(previous, state, src, intervention=None, **cfg):
    cfg.setdefault("max_records_per_partition", None)
    return next_plan(pipeline="p", previous=previous, previous_state=state, source=src, config=PlanConfig(("t",), SINKS, **cfg),
                     now_ms=7, intervention=intervention)


@pytest.fixture
def src():
    s = FakeSource()
    s.add("t", 0, 100, earliest=20)
    s.add("t", 1, 50)
    return s


def ends(plan):
    return [(r.partition, r.start, r.end) for r in plan.ranges]


def test_first_batch_from_earliest_latest_or_timestamp(src):
    assert ends(plan_after(None, None, src)) == [(0, 20, 100), (1, 0, 50)]
    assert ends(plan_after(None, None, src, start="latest")) == [(0, 100, 100), (1, 50, 50)]
    # timestamps are 1000 + 10 * offset: 1300 is offset 30
    assert ends(plan_after(None, None, src, start=1300)) == [(0, 30, 100), (1, 30, 50)]
    assert ends(plan_after(None, None, src, start="timestamp:1")) == [(0, 20, 100), (1, 0, 50)]


def test_next_batch_starts_at_committed_ends_and_is_capped(src):
    first = plan_after(None, None, src, max_records_per_partition=30)
    assert ends(first) == [(0, 20, 50), (1, 0, 30)] and first.batch_seq == 1
    second = plan_after(first, BatchState.COMMITTED, src, max_records_per_partition=30)
    assert ends(second) == [(0, 50, 80), (1, 30, 50)] and second.batch_seq == 2 and second.replay_of is None


def test_after_abort_the_same_ranges_are_replayed(src):
    first = plan_after(None, None, src)
    src.produce("t", 0, 1000)
    replay = plan_after(first, BatchState.ABORTED, src)
    assert replay.ranges == first.ranges and replay.replay_of == 1 and replay.batch_seq == 2


def test_a_plan_names_the_newest_committed_batch_before_it_across_aborts_and_skips(src):
    from dataclasses import replace

    from onceflow.core.planning.interventions import Action, Intervention

    first = plan_after(None, None, src, max_records_per_partition=10)
    assert first.committed_before == 0
    second = plan_after(first, BatchState.COMMITTED, src, max_records_per_partition=10)
    assert second.committed_before == 1
    replay = plan_after(second, BatchState.ABORTED, src)
    again = plan_after(replay, BatchState.ABORTED, src)
    skipped = plan_after(again, BatchState.ABORTED, src, intervention=Intervention(4, Action.SKIP, "ana", "poison", 1))
    assert (replay.committed_before, again.committed_before, skipped.committed_before) == (1, 1, 1)
    assert Plan.from_dict(skipped.to_dict()).committed_before == 1  # stored as a fact
    # after a plan written before the fact, it is not known (readers walk), until the next commit
    older = replace(again, committed_before=None)
    assert plan_after(older, BatchState.ABORTED, src).committed_before is None
    assert plan_after(older, BatchState.COMMITTED, src).committed_before == 4


def test_a_partition_added_to_a_topic_being_read_starts_at_its_first_record(src):
    first = plan_after(None, None, src, start="latest")
    src.add("t", 2, 70, earliest=5)  # written to before the next plan: none of it may be skipped
    for start in ("latest", "earliest", 1300):
        assert ends(plan_after(first, BatchState.COMMITTED, src, start=start)) == [(0, 100, 100), (1, 50, 50), (2, 5, 70)]


def test_a_topic_added_to_the_pipeline_starts_at_the_start_position(src):
    first = plan_after(None, None, src)
    src.add("u", 0, 70, earliest=5)

    def with_u(start):
        config = PlanConfig(("t", "u"), SINKS, start=start, max_records_per_partition=None)
        return next_plan(pipeline="p", previous=first, previous_state=BatchState.COMMITTED, source=src, config=config, now_ms=7)

    assert [(r.topic, r.start, r.end) for r in with_u("latest").ranges if r.topic == "u"] == [("u", 70, 70)]
    assert [(r.topic, r.start, r.end) for r in with_u("earliest").ranges if r.topic == "u"] == [("u", 5, 70)]


def test_undecided_previous_batch_refuses(src):
    first = plan_after(None, None, src)
    for state in (BatchState.PREPARED, BatchState.COMMITTING, BatchState.ABORTING):
        with pytest.raises(PlanningError, match="run recovery"):
            plan_after(first, state, src)


def test_retention_loss_is_named_never_skipped(src):
    previous = Plan("p", 4, (OffsetRange("t", 0, 10, 15), OffsetRange("t", 1, 0, 50)))
    with pytest.raises(OffsetsLostError) as err:
        plan_after(previous, BatchState.COMMITTED, src)
    assert "batch 0000000005" in str(err.value) and "t[0] offsets 15..19" in str(err.value)
    assert err.value.lost == {("t", 0): (15, 20)}
    with pytest.raises(OffsetsLostError, match="t\\[0\\] offsets 10..19"):
        plan_after(previous, BatchState.ABORTED, src)


def test_vanished_or_truncated_partitions_refuse(src):
    previous = Plan("p", 1, (OffsetRange("t", 0, 20, 100), OffsetRange("t", 1, 0, 80)))
    with pytest.raises(PlanningError, match=r"t\[1\] ends at offset 50, before offset 80"):
        plan_after(previous, BatchState.COMMITTED, src)
    previous = Plan("p", 1, (OffsetRange("t", 0, 20, 100), OffsetRange("t", 9, 0, 1)))
    with pytest.raises(PlanningError, match=r"no longer exist: t\[9\]"):
        plan_after(previous, BatchState.COMMITTED, src)


def test_unconfigured_topics_keep_their_position(src):
    previous = Plan("p", 1, (OffsetRange("t", 0, 20, 100), OffsetRange("t", 1, 0, 50), OffsetRange("old", 0, 3, 9)))
    assert OffsetRange("old", 0, 9, 9) in plan_after(previous, BatchState.COMMITTED, src).ranges


def test_bad_settings_fail_fast():
    with pytest.raises(ConfigurationError, match="start_position 'newest'"):
        StartPosition.parse("newest")
    with pytest.raises(ConfigurationError, match="max_records_per_partition must be >= 1"):
        PlanConfig(("t",), SINKS, max_records_per_partition=0)
    with pytest.raises(ConfigurationError, match="topics is empty"):
        PlanConfig((), SINKS)


def test_a_replay_takes_the_same_ranges_unless_it_cannot_get_through(src):
    first = plan_after(None, None, src)  # 80 and 50 records
    same = plan_after(first, BatchState.ABORTED, src)
    assert same.ranges == first.ranges and same.replanned is None
    # the run asks for smaller batches: the replay shrinks from the same starts, and says why
    smaller = plan_after(first, BatchState.ABORTED, src, max_records_per_partition=30)
    assert ends(smaller) == [(0, 20, 50), (1, 0, 30)] and smaller.replay_of == 1
    assert "at most 30 records per partition" in smaller.replanned
    # a replay aborted again is halved, and again, down to one record
    halved = plan_after(same, BatchState.ABORTED, src)
    assert ends(halved) == [(0, 20, 60), (1, 0, 40)] and "halved to 40" in halved.replanned
    quartered = plan_after(halved, BatchState.ABORTED, src)
    assert ends(quartered) == [(0, 20, 40), (1, 0, 20)]
    # nothing is skipped: the next batch starts where the shrunk one ended
    assert ends(plan_after(quartered, BatchState.COMMITTED, src)) == [(0, 40, 100), (1, 20, 50)]


def test_a_topic_created_again_under_the_same_name_is_refused_never_read_on(src):
    src.ids["t"] = "id-one"
    first = plan_after(None, None, src)
    assert first.topic_ids == {"t": "id-one"}
    src.ids["t"] = "id-two"  # deleted and created again: its offsets now count another log
    src.produce("t", 0, 500)  # and it has already passed the old end
    for state in (BatchState.COMMITTED, BatchState.ABORTED):
        with pytest.raises(PlanningError, match=r"topic\(s\) t were deleted and created again since batch 0000000001"):
            plan_after(first, state, src)
    del src.ids["t"]  # a broker that reports no ids: nothing to compare, planning goes on
    assert plan_after(first, BatchState.COMMITTED, src).batch_seq == 2


def test_an_operators_split_caps_the_replay_and_a_skip_starts_after_the_aborted_batch(src):
    from onceflow.core.planning.interventions import Action, Intervention, QuarantinedRange

    first = plan_after(None, None, src)  # 80 and 50 records
    split = Intervention(1, Action.SPLIT, "ana", "record 57 crashes the transform", 1, max_records_per_partition=10)
    replay = plan_after(first, BatchState.ABORTED, src, intervention=split)
    assert ends(replay) == [(0, 20, 30), (1, 0, 10)] and replay.replay_of == 1
    assert replay.replanned == replay.intervention == split.note()
    assert "split to at most 10 records per partition by ana: record 57" in split.note()
    # the run's own smaller cap wins; the plan still says which intervention it followed
    smaller = plan_after(first, BatchState.ABORTED, src, intervention=split, max_records_per_partition=4)
    assert ends(smaller) == [(0, 20, 24), (1, 0, 4)] and smaller.intervention == split.note()
    # a split replay aborted again is halved, as any replay
    assert ends(plan_after(replay, BatchState.ABORTED, src)) == [(0, 20, 25), (1, 0, 5)]

    skip = Intervention(1, Action.SKIP, "ana", "poison", 1,
                        quarantine=(QuarantinedRange(first.ranges[0], 80, "q0"), QuarantinedRange(first.ranges[1], 50, "q1")))
    src.produce("t", 1, 10)
    after = plan_after(first, BatchState.ABORTED, src, intervention=skip)
    assert ends(after) == [(0, 100, 100), (1, 50, 60)] and after.replay_of is None and after.batch_seq == 2
    assert after.intervention == skip.note() and "130 records quarantined" in skip.note()


def test_an_intervention_concerns_the_aborted_batch_before_the_plan_only(src):
    from onceflow.core.planning.interventions import Action, Intervention

    first = plan_after(None, None, src)
    skip = Intervention(1, Action.SKIP, "ana", "poison", 1)
    with pytest.raises(ValueError, match="not aborted"):
        plan_after(first, BatchState.COMMITTED, src, intervention=skip)
    with pytest.raises(ValueError, match="does not concern"):
        plan_after(first, BatchState.ABORTED, src, intervention=Intervention(7, Action.SKIP, "ana", "poison", 1))
    for bad in (dict(by=" "), dict(reason=""), dict(max_records_per_partition=0)):
        with pytest.raises(ValueError):
            Intervention(**{"batch_seq": 1, "action": Action.SPLIT, "by": "a", "reason": "r", "at_ms": 1,
                            "max_records_per_partition": 5, **bad})
    with pytest.raises(ValueError, match="only a split"):
        Intervention(1, Action.SKIP, "ana", "poison", 1, max_records_per_partition=5)
