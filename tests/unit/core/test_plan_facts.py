"""A plan's protocol facts are typed and written by the planner alone; plans of the
old format (one ``params`` dictionary that a run's conf could write) are read
believing only what their planner wrote, and a replacement of a committed batch
is committed only when the ledger justifies it (I7)."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from onceflow.core.ledger.errors import LedgerCorruptError
from onceflow.core.ledger.records import Decision, DecisionOutcome, Kind
from onceflow.core.ledger.storage import open_ledger_storage
from onceflow.core.errors import BatchAborted
from onceflow.core.plan import Interval, OffsetRange, Plan, Replacement
from onceflow.core.states import BatchState
from onceflow.core.batch_view import batch_row, format_rows

from tests.doubles import legacy
from tests.doubles.helpers import config, prepare_all, run_batch, source, world_coordinator

H = 3_600_000


@pytest.fixture
def local(tmp_path):
    return open_ledger_storage(str(tmp_path / "ledger"))


def test_facts_and_transform_parameters_are_stored_apart():
    plan = Plan("p", 3, (OffsetRange("in", 0, 0, 5),), run_id="r", interval=Interval(H, 2 * H), slot=3,
                batches_in_flight=16, replaces=Replacement(1, {"files": "replaced"}), transform_params={"slot": 9})
    stored = plan.to_dict()
    assert "params" not in stored and stored["transform_params"] == {"slot": 9}
    assert stored["facts"]["replaces"] == {"batch_seq": 1, "outputs": {"files": "replaced"}}
    assert Plan.from_dict(stored) == plan


@pytest.mark.parametrize("fact, value", [("interval", "2026-11-25T00:00:00Z/2026-11-25T01:00:00Z"), ("slot", "3"),
                                         ("replaces", 1), ("backlog", -4), ("run_id", None)])
def test_a_malformed_fact_of_this_format_is_refused_naming_it(fact, value):
    stored = Plan("p", 2, ()).to_dict()
    stored["facts"][fact] = value
    with pytest.raises(ValueError, match=f"fact '{fact}' is malformed"):
        Plan.from_dict(stored)


@pytest.mark.parametrize("injected", [
    {"replaces": 1},
    {"replaces": 1, "reprocessed": {"files": "replaced"}},
    {"interval": "2026-11-25T00:00:00Z/2026-11-25T01:00:00Z"},
    {"interval": {"start_ms": 0, "end_ms": H}},
    {"slot": 3},
    {"batches_in_flight": 2, "slot": 0},
])
def test_an_old_offsets_plan_does_not_take_a_run_conf_for_a_fact(injected):
    old_offsets_params = {"start_position": "earliest", "max_records_per_partition": 100, "run_id": "manual__1",
                          "topic_ids": {"in": "id"}, "backlog": 40}
    plan = Plan.from_dict(legacy.plan_body(Plan("p", 4, ()), {**injected, **old_offsets_params}))
    assert (plan.interval, plan.slot, plan.batches_in_flight, plan.replaces) == (None, None, None, None)
    assert set(injected) - {"reprocessed"} <= set(plan.disbelieved) or "replaces" in plan.disbelieved
    assert (plan.run_id, plan.topic_ids, plan.backlog, plan.max_records_per_partition) == ("manual__1", {"in": "id"}, 40, 100)


def test_an_old_interval_plan_is_read_with_every_fact_its_planner_wrote():
    params = {"run_id": "backfill__1", "slot": 5 % 4, "batches_in_flight": 4, "interval": {"start_ms": H, "end_ms": 2 * H},
              "backlog": 7, "replaces": 2, "reprocessed": {"files": "replaced"}, "page": "a conf key of that run"}
    plan = Plan.from_dict(legacy.plan_body(Plan("p", 5, ()), params))
    assert (plan.interval, plan.slot, plan.batches_in_flight) == (Interval(H, 2 * H), 1, 4)
    assert plan.replaces == Replacement(2, {"files": "replaced"}) and plan.run_id == "backfill__1"
    assert list(plan.disbelieved) == ["page"]


def test_status_shows_an_old_plan_with_a_malformed_interval_instead_of_crashing(local):
    coord, _, parts = world_coordinator(local)
    first = run_batch(coord, parts, source())
    nxt = dataclasses.replace(first, batch_seq=2, ranges=tuple(dataclasses.replace(r, start=r.end) for r in first.ranges))
    legacy.write_plan(coord.ledger, nxt, {"interval": "2026-11-25T00:00:00Z/2026-11-25T01:00:00Z", "run_id": "r2"})
    row = batch_row(coord.describe(2))
    assert row["interval"] is None and "interval" in row["disbelieved"] and row["run_id"] == "r2"
    assert "0000000002" in format_rows([row])


def test_a_new_format_plan_edited_by_hand_is_refused_as_corrupt(local):
    coord, _, parts = world_coordinator(local)
    run_batch(coord, parts, source())
    key = coord.ledger.plan_key(1)
    edited = coord.ledger.storage.read(key).replace(b'"facts": {', b'"facts": {\n  "slot": "three",')
    coord.ledger.storage.overwrite(key, edited)
    with pytest.raises(LedgerCorruptError, match="checksum mismatch|malformed"):
        coord.describe(1)


def _old_batch_replacing_the_first(coord, parts, world):
    """What onceflow before typed facts did with conf {"replaces": 1} in an offsets pipeline: the
    plan carried it, and the Spark job put it into the votes of the kinds that replace."""
    first = run_batch(coord, parts, source(250, 40))
    with_conf = coord.plan_next(source(250, 40), config())
    coord.ledger.storage.overwrite(coord.ledger.plan_key(with_conf.batch_seq),
                                   legacy.format1(Kind.PLAN, legacy.plan_body(with_conf, {"replaces": 1, "run_id": None})))
    attempt = coord.begin_attempt(with_conf.batch_seq)
    for participant in parts.values():
        vote = dataclasses.replace(participant.prepare(with_conf, attempt), replaces=first.batch_seq)
        coord.record_vote(with_conf.batch_seq, attempt, vote)
    return first, with_conf


def test_a_vote_replacing_a_batch_the_plan_does_not_replace_is_refused_before_the_decision(local):
    coord, world, parts = world_coordinator(local)
    first, with_conf = _old_batch_replacing_the_first(coord, parts, world)
    with pytest.raises(BatchAborted, match=r"refused: its vote replaces batch 0000000001, the plan replaces none"):
        coord.commit(with_conf.batch_seq)
    assert {("files", 1), ("events", 1)} <= set(world.visible)  # the committed batch is intact
    assert coord.describe(with_conf.batch_seq).state is BatchState.ABORTED
    replay = coord.plan_next(source(250, 40), config())  # the pipeline goes on: the same records, no replacement
    assert replay.ranges == with_conf.ranges and replay.replaces is None
    prepare_all(coord, parts, replay)
    assert coord.commit(replay.batch_seq).state is BatchState.COMMITTED
    assert {("files", 1), ("files", replay.batch_seq)} <= set(world.visible)


def test_a_commit_decided_by_an_older_onceflow_on_a_conf_replacement_keeps_the_committed_batch(local, caplog):
    coord, world, parts = world_coordinator(local)
    first, with_conf = _old_batch_replacing_the_first(coord, parts, world)
    votes = {name: coord.ledger.read_vote(with_conf.batch_seq, 1, name).vote for name in parts}
    coord.ledger.create_decision(Decision(with_conf.batch_seq, DecisionOutcome.COMMIT, 1, votes, "onceflow 0.1.0", 0,
                                          "all votes valid"))
    with caplog.at_level(logging.WARNING, logger="onceflow.core.coordinator"):
        status = coord.recover(with_conf.batch_seq)
    assert status.state is BatchState.COMMITTED
    assert {("files", 1), ("events", 1), ("files", 2), ("events", 2)} <= set(world.visible)
    assert "would remove committed batch 0000000001" in caplog.text


def test_an_interval_batch_may_replace_only_a_committed_batch_of_its_interval_with_its_ranges(local):
    from onceflow.core.planning.interval_planner import IntervalPlanner
    from tests.unit.core.test_intervals import StampedLog, commit, every_minute, hours

    coord, world, parts = world_coordinator(local)
    planner = IntervalPlanner(coord, config(None), grace_ms=0, pool=4, clock=lambda: 400_010 * H)
    log = StampedLog(every_minute(0, 3), every_minute(0, 3))
    first, second = (planner.plan(log, i, run_id=str(i)).plan for i in hours(2))
    commit(coord, parts, first)
    commit(coord, parts, second)
    # A plan that names the first hour's batch from the second hour (an old plan's conf, an edited record).
    wrong = planner.plan(log, hours(2)[1], run_id="again", reprocess=lambda: {"files": "replaced"}).plan
    wrong = dataclasses.replace(wrong, replaces=Replacement(first.batch_seq, {"files": "replaced"}))
    coord.ledger.storage.overwrite(coord.ledger.plan_key(wrong.batch_seq),
                                   legacy.format1(Kind.PLAN, legacy.plan_body(wrong, {
                                       "run_id": "again", "slot": wrong.slot, "batches_in_flight": 4,
                                       "interval": wrong.interval.to_dict(), "replaces": first.batch_seq,
                                       "reprocessed": {"files": "replaced"}})))
    assert "read interval" in coord.replacement_refusal(coord.plan(wrong.batch_seq))
    attempt = coord.begin_attempt(wrong.batch_seq)
    for participant in parts.values():
        coord.record_vote(wrong.batch_seq, attempt,
                          dataclasses.replace(participant.prepare(wrong, attempt), replaces=first.batch_seq))
    with pytest.raises(BatchAborted, match=r"refused: batch 0000000003 names committed batch 0000000001 .* read interval"):
        coord.commit(wrong.batch_seq)
    assert ("files", first.batch_seq) in world.visible
