"""The coordinator's steps one by one, on a local ledger (the property test
in test_coordinator_chaos.py drives them on all three backends)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onceflow.core.ledger.errors import LedgerCorruptError, LedgerFormatError
from onceflow.core.ledger.storage import open_ledger_storage
from onceflow.core.ledger import records
from onceflow.core.errors import (
    BatchAborted,
    CommitFailed,
    ConcurrentPlanError,
    InterventionRefused,
    RetryLater,
    StaleAttempt,
)
from onceflow.core.coordinator import NOTE_CHARS, effect_note
from onceflow.core.participant import Outcome, Result
from onceflow.core.states import BatchState, IllegalTransition
from onceflow.config.settings import ConfigurationError

from tests.doubles.fakes import FAILED, RETRY
from tests.doubles.helpers import config, prepare_all, run_batch, source, world_coordinator


@pytest.fixture
def local(tmp_path):
    return open_ledger_storage(str(tmp_path / "ledger"))


def test_batches_commit_and_chain_without_gap(local):
    coord, world, parts = world_coordinator(local)
    src = source(250, 40)
    first = run_batch(coord, parts, src)
    assert [(r.start, r.end) for r in first.ranges] == [(0, 100), (0, 40)]
    status = coord.describe(first.batch_seq)
    assert status.state is BatchState.COMMITTED and status.attempt == 1 and not status.missing_votes
    assert set(status.done) == {"files", "events", "_batch"}
    assert {"planned", "attempt_claimed", "last_vote", "decided", "done"} <= set(status.timings)
    assert world.visible[("files", 1)] == status.decision.votes["files"]
    second = run_batch(coord, parts, src)
    assert [(r.start, r.end) for r in second.ranges] == [(100, 200), (40, 40)]
    assert second.sink("events").transactional_ids == ("onceflow-pipe-events-pool2-0", "onceflow-pipe-events-pool2-1")
    assert coord.latest_seq() == 2 and coord.ledger.read_head().last_committed_seq == 2


def test_commit_is_idempotent(local):
    coord, world, parts = world_coordinator(local)
    plan = run_batch(coord, parts, source())
    again = coord.commit(plan.batch_seq)
    assert again.state is BatchState.COMMITTED and not world.refused


def test_missing_vote_aborts_and_next_plan_replays_the_same_ranges(local):
    coord, world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    attempt = coord.begin_attempt(plan.batch_seq)
    coord.record_vote(plan.batch_seq, attempt, parts["files"].prepare(plan, attempt))
    with pytest.raises(BatchAborted, match=r"no vote from \['events'\].*re-reads the same records"):
        coord.commit(plan.batch_seq)
    assert coord.describe(plan.batch_seq).state is BatchState.ABORTED
    assert ("files", 1) in world.aborted and not world.visible
    replay = coord.plan_next(source(500, 500), config())
    assert replay.ranges == plan.ranges and replay.replay_of == plan.batch_seq and replay.batch_seq == 2


def test_zombie_vote_of_older_attempt_is_never_committed(local):
    coord, world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    old = coord.begin_attempt(plan.batch_seq)
    old_vote = parts["files"].prepare(plan, old)
    new = prepare_all(coord, parts, plan)
    assert new == old + 1
    with pytest.raises(StaleAttempt, match="not the latest"):
        coord.record_vote(plan.batch_seq, old, old_vote)
    status = coord.commit(plan.batch_seq)
    assert status.decision.attempt == new
    assert world.visible[("files", 1)].attempt == new and not world.refused


def test_after_the_decision_no_attempt_or_vote_counts(local):
    coord, world, parts = world_coordinator(local)
    plan = run_batch(coord, parts, source())
    with pytest.raises(IllegalTransition, match="committed"):
        coord.begin_attempt(plan.batch_seq)
    late = parts["files"].prepare(plan, 1)
    with pytest.raises(StaleAttempt, match=r"vote of 'files' in attempt 1 \(ignored\) refused.*it is committed"):
        coord.record_vote(plan.batch_seq, 1, late)
    assert coord.describe(plan.batch_seq).decision.votes["files"] != late


def _record_steps(coord, monkeypatch) -> list[str]:
    """Every transition check and every state-changing ledger write, in order."""
    import onceflow.core.coordinator as coordinator_module

    steps: list[str] = []
    check = coordinator_module.check_transition

    def checked(current, target, **kw):
        steps.append(f"check {current.value}->{target.value}")
        check(current, target, **kw)

    monkeypatch.setattr(coordinator_module, "check_transition", checked)
    for method, label in (("claim_attempt", "attempt"), ("create_vote", "vote"), ("create_decision", "decision")):
        write = getattr(coord.ledger, method)
        monkeypatch.setattr(coord.ledger, method, lambda *a, _w=write, _l=label, **k: (steps.append(f"write {_l}"), _w(*a, **k))[1])
    create_done = coord.ledger.create_done

    def done(marker):
        steps.append(f"write done {marker.effect}")
        return create_done(marker)

    monkeypatch.setattr(coord.ledger, "create_done", done)
    return steps


def test_every_state_change_passes_the_transition_table(local, monkeypatch):
    coord, world, parts = world_coordinator(local)
    steps = _record_steps(coord, monkeypatch)
    run_batch(coord, parts, source())
    assert steps == [
        "check planned->preparing", "write attempt",
        "check preparing->preparing", "write vote",
        "check preparing->preparing", "write vote",
        "check prepared->committing", "write decision",
        "write done events", "write done files",
        "check committing->committed", "write done _batch",
    ]
    steps.clear()
    plan = coord.plan_next(source(), config())
    attempt = coord.begin_attempt(plan.batch_seq)
    coord.record_vote(plan.batch_seq, attempt, parts["files"].prepare(plan, attempt))
    with pytest.raises(BatchAborted):
        coord.commit(plan.batch_seq)  # "events" never voted
    assert steps == [
        "check planned->preparing", "write attempt",
        "check preparing->preparing", "write vote",
        "check preparing->aborting", "write decision",
        "write done files", "write done events",
        "check aborting->aborted", "write done _batch",
    ]


def test_a_vote_cannot_be_replaced_within_its_attempt(local):
    coord, world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    attempt = coord.begin_attempt(plan.batch_seq)
    vote = parts["files"].prepare(plan, attempt)
    coord.record_vote(plan.batch_seq, attempt, vote)
    coord.record_vote(plan.batch_seq, attempt, vote)  # same vote again: fine
    with pytest.raises(StaleAttempt, match="different vote"):
        coord.record_vote(plan.batch_seq, attempt, parts["files"].prepare(plan, attempt))


def test_invalid_vote_aborts_and_transient_verify_decides_nothing(local):
    coord, world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    parts["events"].verify_answer = RETRY
    with pytest.raises(RetryLater, match="verify"):
        coord.commit(plan.batch_seq)
    assert coord.describe(plan.batch_seq).state is BatchState.PREPARED
    parts["events"].verify_answer = Result(Outcome.FAILED, "transaction too old")
    with pytest.raises(BatchAborted, match="transaction too old"):
        coord.commit(plan.batch_seq)
    assert not world.visible


def test_failed_commit_is_loud_and_redone_later(local):
    coord, world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    parts["files"].commit_answer = FAILED
    with pytest.raises(CommitFailed, match="participant 'files'.*not be reported"):
        coord.commit(plan.batch_seq)
    assert coord.describe(plan.batch_seq).state is BatchState.COMMITTING
    with pytest.raises(CommitFailed):
        coord.recover()
    parts["files"].commit_answer = None
    assert coord.recover().state is BatchState.COMMITTED
    assert set(world.visible) == {("files", 1), ("events", 1)}


def test_status_keeps_what_each_output_said_of_its_commit_and_abort(local):
    """An Iceberg commit names the snapshot it made: status and the page read it from the done marker."""
    coord, _world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    parts["files"].commit_answer = Result(Outcome.DONE, "3 data files, 40 rows committed in snapshot 4242")
    done = coord.commit(plan.batch_seq).done
    assert done["files"].detail == "done: 3 data files, 40 rows committed in snapshot 4242"
    assert done["events"].detail == "done"  # an output that said nothing more: its outcome alone
    aborted = coord.plan_next(source(500, 80), config())
    prepare_all(coord, parts, aborted)
    parts["events"].abort_answer = Result(Outcome.DONE, "2 transactions aborted")
    coord.rollback(aborted.batch_seq, "a test")
    assert coord.describe(aborted.batch_seq).done["events"].detail == "done: 2 transactions aborted"
    assert len(effect_note(Result(Outcome.DONE, "x" * 10_000))) == len("done: ") + NOTE_CHARS  # a record stays small


def test_a_failed_abort_stays_aborting_and_status_shows_what_the_sink_said_until_it_is_done(local):
    from onceflow.core.batch_view import batch_row, format_rows
    from onceflow.core.errors import AbortFailed

    coord, world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    parts["events"].abort_answer = Result(Outcome.FAILED, "split 3 committed behind our back: stop that writer")
    with pytest.raises(AbortFailed, match="participant 'events'.*split 3"):
        coord.rollback(plan.batch_seq, "spark task failed")

    status = coord.describe(plan.batch_seq)
    assert status.state is BatchState.ABORTING and set(status.failed) == {"events"}
    row = batch_row(status)
    assert row["failed"]["events"]["detail"] == "split 3 committed behind our back: stop that writer"
    shown = format_rows([row])
    assert "abort of events FAILED" in shown and "split 3 committed behind our back: stop that writer" in shown
    assert "re-run the rollback task or `onceflow recover`" in shown

    parts["events"].abort_answer = None
    assert coord.recover().state is BatchState.ABORTED
    assert batch_row(coord.describe(plan.batch_seq))["failed"] == {}  # a note of a failure since fixed is not shown


def test_rollback_after_commit_decision_finishes_the_commit(local):
    coord, world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    parts["events"].commit_answer = RETRY
    with pytest.raises(RetryLater):
        coord.commit(plan.batch_seq)
    parts["events"].commit_answer = None
    status = coord.rollback(plan.batch_seq, "spark task failed")
    assert status.state is BatchState.COMMITTED and len(world.visible) == 2 and not world.aborted


def test_recovery_presumes_abort_without_a_decision(local):
    coord, world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    status = coord.recover()
    assert status.state is BatchState.ABORTED and "presumed abort" in status.decision.reason
    assert not world.visible and world.aborted == {("files", 1), ("events", 1)}


def test_recovery_does_what_its_table_says_and_says_so_one_line_per_effect(local, caplog):
    """A commit task that died between effects leaves COMMITTING; the next
    recovery redoes the commit (RECOVERY), and its log names each effect."""
    import logging

    from onceflow.core import faults

    coord, world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    faults.arm("commit.between_effects", "raise")
    try:
        with pytest.raises(faults.InjectedFault):
            coord.commit(plan.batch_seq)
    finally:
        faults.disarm()
    assert coord.describe(plan.batch_seq).state is BatchState.COMMITTING
    caplog.clear()  # only what recovery logs
    with caplog.at_level(logging.INFO, logger="onceflow.core.coordinator"):
        status = coord.recover()
    assert status.state is BatchState.COMMITTED
    lines = [r.getMessage() for r in caplog.records]
    assert f"recovery: batch {plan.batch_id} of pipe was left committing: redo commit" in lines
    committed = [line for line in lines if line.startswith(f"batch {plan.batch_id} of pipe: ") and " committed (" in line]
    assert len(committed) == 1, lines  # one sink was committed before the crash, the other by recovery
    assert f"batch {plan.batch_id} of pipe: committed" in lines
    assert set(world.visible) == {("files", 1), ("events", 1)}  # both effects applied, each once
    assert world.visible[("files", 1)] == status.decision.votes["files"]


def test_plan_task_retry_reuses_its_plan_and_other_runs_recover_first(local):
    coord, world, parts = world_coordinator(local)
    src = source()
    plan = coord.plan_next(src, config(), run_id="run-1")
    src.produce("in", 1, 30)
    assert coord.plan_next(src, config(), run_id="run-1") == plan
    other = coord.plan_next(src, config(), run_id="run-2")
    assert other.batch_seq == 2 and other.replay_of == 1 and other.ranges == plan.ranges
    assert coord.describe(1).state is BatchState.ABORTED


def test_concurrent_planner_loses_cleanly(local):
    coord, world, parts = world_coordinator(local)
    winner = coord.plan_next(source(), config(), run_id="run-a")
    # a second planner that read the ledger before run-a wrote its plan
    from onceflow.core.planning.offsets import next_plan

    mine = next_plan(pipeline="pipe", previous=None, previous_state=None, source=source(), config=config(), now_ms=1, run_id="run-b")
    created, existing = coord.ledger.create_plan(mine)
    assert not created and existing == winner
    # The same race through plan_next: run-b's view of the ledger predates run-a's plan.
    coord.ledger.latest_seq = lambda: 0  # type: ignore[method-assign]
    with pytest.raises(ConcurrentPlanError, match="max_active_runs=1"):
        coord.plan_next(source(), config(), run_id="run-b")


def test_configuration_mismatch_fails_fast(local):
    coord, world, parts = world_coordinator(local)
    from onceflow.core.plan import SinkPlan
    from onceflow.core.planning.config import PlanConfig

    with pytest.raises(ConfigurationError, match="give every sink exactly one participant"):
        coord.plan_next(source(), PlanConfig(("in",), (SinkPlan("files", "files", 1),)))
    with pytest.raises(ConfigurationError, match="pipeline name 'a/b'"):
        world_coordinator(local, pipeline="a/b")


def _decision_file(coord, seq):
    return Path(coord.ledger.storage.describe(coord.ledger.decision_key(seq)))


def test_hand_edited_record_is_refused_naming_batch_file_and_fix(local):
    coord, world, parts = world_coordinator(local)
    plan = run_batch(coord, parts, source())
    path = _decision_file(coord, plan.batch_seq)
    doc = json.loads(path.read_text())
    doc["body"]["outcome"] = "ABORT"
    path.write_text(json.dumps(doc))
    with pytest.raises(LedgerCorruptError) as err:
        coord.describe(plan.batch_seq)
    message = str(err.value)
    assert "pipeline 'pipe', batch 0000000001" in message and str(path) in message
    assert "checksum" in message and "never hand-edit" in message and "version history" in message
    path.write_text('{"format": 1, "kind": "decis')
    with pytest.raises(LedgerCorruptError, match="unreadable ledger record"):
        coord.recover()


def test_newer_and_older_formats_are_refused_with_what_to_do(local, monkeypatch):
    coord, world, parts = world_coordinator(local)
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    monkeypatch.setattr(records, "FORMAT", records.FORMAT + 1)
    monkeypatch.setattr(records, "MIN_FORMAT", records.FORMAT)
    with pytest.raises(LedgerFormatError, match=r"older onceflow.*half-committed.*finish it with the older version"):
        coord.commit(plan.batch_seq)
    monkeypatch.undo()
    path = Path(local.describe(coord.ledger.plan_key(plan.batch_seq)))
    doc = json.loads(path.read_text())
    doc["format"] = 9
    path.write_text(json.dumps(doc))
    with pytest.raises(LedgerFormatError, match=r"written by a newer onceflow.*Upgrade onceflow"):
        coord.commit(plan.batch_seq)


def test_stale_missing_or_torn_head_hint_never_hides_batches(local):
    coord, world, parts = world_coordinator(local)
    src = source(10_000)
    for _ in range(5):
        run_batch(coord, parts, src)
    head = Path(local.describe(coord.ledger.head_key))
    head.unlink()
    assert coord.latest_seq() == 5
    coord.ledger.write_head(records.Head(latest_seq=2))
    assert coord.latest_seq() == 5
    head.write_text("{torn")
    assert coord.latest_seq() == 5
    coord.ledger.write_head(records.Head(latest_seq=50))  # ahead of the truth (a restored ledger)
    assert coord.latest_seq() == 5
    assert run_batch(coord, parts, src).batch_seq == 6


def test_an_output_removed_from_the_spec_never_holds_a_batch_or_the_pipeline(local):
    # Batch 2 was pre-committed by both outputs; then "events" left the spec. Its batches still read,
    # commit refuses naming the fix, and recovery aborts the batch (saying what was left) so the
    # pipeline moves on; it used to raise in abort too, leaving the batch ABORTING for ever.
    import dataclasses

    from onceflow.core.coordinator import Coordinator
    from tests.doubles.helpers import SINKS

    coord, world, parts = world_coordinator(local)
    src = source(250, 40)
    run_batch(coord, parts, src)
    pending = coord.plan_next(src, config())
    prepare_all(coord, parts, pending)
    without_events = Coordinator(local, "pipe", {"files": parts["files"]})

    assert without_events.describe(1).state is BatchState.COMMITTED  # status and the UI read old batches
    with pytest.raises(ConfigurationError, match=r"has sinks \['events'\] in its plan .* Configure them to commit it"):
        without_events.commit(pending.batch_seq)
    status = without_events.recover()
    assert status.state is BatchState.ABORTED
    assert "sink 'events' is no longer configured" in status.done["events"].detail
    assert ("files", pending.batch_seq) not in world.visible  # the configured output was rolled back
    nxt = without_events.plan_next(src, dataclasses.replace(config(), sinks=(SINKS[0],)))
    assert nxt.replay_of == pending.batch_seq and [s.name for s in nxt.sinks] == ["files"]



def test_an_operator_splits_or_skips_only_the_latest_aborted_batch_and_the_next_plan_follows(local):
    from onceflow.core.planning.interventions import Action, Intervention

    coord, world, parts = world_coordinator(local)
    src = source(250, 40)

    def split(seq, records=3):
        return Intervention(seq, Action.SPLIT, "ana", "record 150 crashes the transform", 1, max_records_per_partition=records)

    run_batch(coord, parts, src)  # batch 1: [0, 100) and [0, 40)
    with pytest.raises(InterventionRefused, match="committed, not aborted: a committed batch is never changed"):
        coord.intervene(split(1))
    poison = coord.plan_next(src, config())  # batch 2: [100, 200) and [40, 40)
    with pytest.raises(InterventionRefused, match="is planned, not aborted: finish it first with `onceflow recover`"):
        coord.intervene(split(2))
    with pytest.raises(InterventionRefused, match="no batch 0+3"):
        coord.intervene(split(3))
    coord.recover()
    with pytest.raises(InterventionRefused, match="batch 0+1 .*not the latest"):
        coord.intervene(split(1))
    assert coord.intervene(split(2)) == coord.describe(2).intervention
    with pytest.raises(InterventionRefused, match="already intervened on .*split to at most 3"):
        coord.intervene(split(2, 5))
    replay = coord.plan_next(src, config())
    assert [(r.start, r.end) for r in replay.ranges] == [(100, 103), (40, 40)] and replay.replay_of == 2
    assert replay.intervention == split(2).note()
    with pytest.raises(InterventionRefused, match="not the latest"):
        coord.intervene(Intervention(2, Action.SKIP, "ana", "late", 1))

    # batch 3 fails too: skipped, the next batch starts after it, as after a commit
    coord.recover()
    coord.intervene(Intervention(3, Action.SKIP, "ana", "still poison", 1))
    after = coord.plan_next(src, config())
    assert [(r.start, r.end) for r in after.ranges] == [(103, 203), (40, 40)] and after.replay_of is None
    assert coord.describe(3).intervention.action is Action.SKIP and "still poison" in after.intervention
    assert poison.batch_seq == 2 and not world.visible.get(("files", 2)) and not world.visible.get(("files", 3))


def test_an_intervention_written_after_the_next_plan_is_void_and_says_so(local):
    from onceflow.core.planning.interventions import Action, Intervention

    coord, world, parts = world_coordinator(local)
    coord.plan_next(source(), config())
    coord.recover()
    # The operator checked batch 1 (latest, aborted) just before a run planned its replay.
    coord.check_intervention(1)
    coord.plan_next(source(), config())
    coord.check_intervention = lambda seq: None  # type: ignore[method-assign]
    with pytest.raises(InterventionRefused, match="batch 0+2 .* was planned while this intervention was recorded"):
        coord.intervene(Intervention(1, Action.SKIP, "ana", "poison", 1))
