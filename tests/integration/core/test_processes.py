"""Real OS processes: two racing deciders, and commit tasks killed with os._exit."""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import sys
import uuid

import pytest

from onceflow.core.ledger.storage import open_ledger_storage
from onceflow.core.coordinator import Coordinator
from onceflow.core.states import BatchState

from tests.doubles.fakes import participants
from tests.doubles.helpers import config, prepare_all, source
from .workers import build_storage, race_worker

from tests.support import ROOT


ROUNDS = {"local": 20, "s3": 10}  # S3 rounds cost ~2.5 s each on a loaded 2-core machine


@pytest.fixture(params=["local", "s3"])
def storage_spec(request, tmp_path):
    if request.param == "local":
        return ("local", str(tmp_path / "ledger"))
    return ("s3", request.getfixturevalue("s3_bucket"), f"race-{uuid.uuid4().hex[:6]}", request.getfixturevalue("s3_endpoint"))


@pytest.mark.chaos
def test_commit_and_rollback_racing_end_with_one_decision_both_follow(storage_spec, tmp_path):
    effects = tmp_path / "effects"
    parts = participants("dir", effects)
    coord = Coordinator(build_storage(storage_spec), "race", parts)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    workers = []
    for role in ("commit", "rollback"):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=race_worker, args=(role, storage_spec, str(effects), child, barrier), daemon=True)
        proc.start()
        workers.append((role, proc, parent))
    src, rng, winners = source(10_000, 10_000), random.Random(7), []
    try:
        for _ in range(ROUNDS[storage_spec[0]]):
            plan = coord.plan_next(src, config(max_records=10))
            prepare_all(coord, parts, plan)
            for role, _, conn in workers:  # jitter so that either side may win
                conn.send((plan.batch_seq, rng.uniform(0, 0.02) if role == "commit" else rng.uniform(0, 0.01)))
            outcomes = {role: conn.recv() for role, _, conn in workers if conn.poll(60)}
            decision = coord.ledger.read_decision(plan.batch_seq)
            expected = BatchState.COMMITTED.value if decision.outcome.value == "COMMIT" else BatchState.ABORTED.value
            assert outcomes == {"commit": expected, "rollback": expected}, (plan.batch_seq, decision, outcomes)
            assert coord.describe(plan.batch_seq).state.value == expected
            visible = {name: (effects / "visible" / name / f"{plan.batch_seq}.json").exists() for name in parts}
            assert all(visible.values()) if expected == "committed" else not any(visible.values())
            winners.append(decision.decided_by)
        assert not any(p.refused() for p in parts.values())
    finally:
        for _, proc, conn in workers:
            conn.send(None)
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    print("winners:", {w: winners.count(w) for w in set(winners)})


@pytest.mark.chaos
@pytest.mark.parametrize(
    "point, finished_as",
    [
        ("ledger.decision.before_write", BatchState.ABORTED),  # no decision: presumed abort
        ("ledger.decision.after_write", BatchState.COMMITTED),  # decided: the commit is redone
        ("commit.effect.after", BatchState.COMMITTED),  # applied but not marked: redo is idempotent
        ("commit.between_effects", BatchState.COMMITTED),
    ],
)
def test_commit_task_killed_at_a_fault_point_is_finished_by_recovery(tmp_path, point, finished_as):
    ledger_dir, effects = tmp_path / "ledger", tmp_path / "effects"
    parts = participants("dir", effects)
    coord = Coordinator(open_ledger_storage(str(ledger_dir)), "crash", parts)
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    env = {**os.environ, "ONCEFLOW_FAULTS": f"{point}=crash"}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.core.workers", str(ledger_dir), str(effects), str(plan.batch_seq)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 137, proc.stderr
    assert "commit finished" not in proc.stdout and f"injected crash at fault point {point!r}" in proc.stderr
    assert not coord.describe(plan.batch_seq).state.terminal
    status = coord.recover()
    assert status.state is finished_as
    visible = [(effects / "visible" / n / f"{plan.batch_seq}.json").exists() for n in parts]
    assert all(visible) if finished_as is BatchState.COMMITTED else not any(visible)
    assert not any(p.refused() for p in parts.values())
    # and the pipeline goes on from there
    following = coord.plan_next(source(), config())
    assert following.replay_of == (plan.batch_seq if finished_as is BatchState.ABORTED else None)
