"""A batch's state is read in one place (``BatchRecords``): the coordinator, ``onceflow
status``, the UI page and the audit report the same state for every row of the states
table, read from a local-storage ledger, and only the coordinator writes."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from onceflow.airflow.ui.overview import batch_page
from onceflow.config.deployment import Deployment
from onceflow.core.batch_id import BatchId
from onceflow.core.coordinator import Coordinator
from onceflow.core.errors import AbortFailed, CommitFailed
from onceflow.core.ledger.storage import LedgerStorage
from onceflow.core.states import TRANSITIONS, BatchState
from onceflow.ops.audit.ranges import accounted_plans, every_batch, uncommitted_plans
from onceflow.ops.cli import main
from onceflow.pipeline.runtime import PipelineRuntime
from onceflow.pipeline.spec import FILES, PipelineSpec, SinkSpec
from tests.doubles.fakes import FAILED, World, participants
from tests.doubles.helpers import config, prepare_all, source

S = BatchState
# The fakes' outputs (tests.doubles.helpers.SINKS), as a spec names them; files, so no transaction is open.
SPEC = PipelineSpec("states", ("in",), "m:f", (SinkSpec("files", FILES, "f"), SinkSpec("events", FILES, "e")))


def _fail(parts, step: str, error: type[Exception], act) -> None:
    """``act()`` with the events output answering FAILED to ``step``: the batch stays decided, unfinished."""
    setattr(parts["events"], f"{step}_answer", FAILED)
    with pytest.raises(error):
        act()
    setattr(parts["events"], f"{step}_answer", None)


def _vote_once(coord, participant, plan) -> None:
    """An attempt in which one output of two voted."""
    attempt = coord.begin_attempt(plan.batch_seq)
    coord.record_vote(plan.batch_seq, attempt, participant.prepare(plan, attempt))


# How each state of the table is reached, from a batch just planned.
REACH = {
    S.PLANNED: lambda coord, parts, plan: None,
    S.PREPARING: lambda coord, parts, plan: _vote_once(coord, parts["files"], plan),
    S.PREPARED: lambda coord, parts, plan: prepare_all(coord, parts, plan),
    S.COMMITTING: lambda coord, parts, plan: (prepare_all(coord, parts, plan),
                                              _fail(parts, "commit", CommitFailed, lambda: coord.commit(plan.batch_seq))),
    S.COMMITTED: lambda coord, parts, plan: (prepare_all(coord, parts, plan), coord.commit(plan.batch_seq)),
    S.ABORTING: lambda coord, parts, plan: _fail(parts, "abort", AbortFailed, lambda: coord.rollback(plan.batch_seq, "test")),
    S.ABORTED: lambda coord, parts, plan: coord.rollback(plan.batch_seq, "test"),
}


def test_every_state_of_the_table_is_reached():
    assert set(REACH) == set(TRANSITIONS)


def test_the_coordinator_status_the_page_and_the_audit_agree_on_the_state_of_every_row(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "127.0.0.1:9")  # named, never asked: reading the ledger needs no broker
    warehouse = f"file://{tmp_path}/warehouse"
    runtime = PipelineRuntime(SPEC, Deployment.from_environment(warehouse))
    parts = participants("world", World())
    coord = Coordinator(runtime.ledger_storage, SPEC.name, parts)
    first = coord.plan_next(source(), config())
    expected = {}
    for state in TRANSITIONS:  # one batch in each state, side by side in one ledger
        plan = first if not expected else coord.plan_new_batch(lambda seq: replace(first, batch_seq=seq, run_id=f"r{seq}"))
        REACH[state](coord, parts, plan)
        expected[plan.batch_seq] = state

    # The readers write nothing and build no participant.
    for write in ("create", "overwrite"):
        monkeypatch.setattr(LedgerStorage, write, lambda *a, **k: pytest.fail("a reader wrote to the ledger"))
    monkeypatch.setattr(PipelineRuntime, "participants", lambda self: pytest.fail("a reader built the participants"))

    by_coordinator = {seq: coord.batch(seq).state for seq in expected}
    assert main(["status", "--pipeline", SPEC.name, "--spec", f"{__name__}:SPEC", "--warehouse", warehouse, "--json"]) == 0
    by_status = {row["batch_seq"]: S(row["state"]) for row in json.loads(capsys.readouterr().out)}
    by_page = {row["batch_seq"]: S(row["state"]) for row in batch_page(PipelineRuntime(SPEC, runtime.deployment))["batches"]}
    reader = PipelineRuntime(SPEC, runtime.deployment).reader
    by_audit = {status.batch_seq: status.state for status in every_batch(reader)}
    assert by_coordinator == by_status == by_page == by_audit == expected

    committed, _ = accounted_plans(reader)
    assert [plan.batch_seq for plan, _ in committed] == [seq for seq, s in expected.items() if s is S.COMMITTED]
    assert set(uncommitted_plans(reader)) == {str(BatchId(seq)) for seq, s in expected.items() if s is not S.COMMITTED}


def test_a_decided_batch_is_known_by_its_decision_and_done_marker_alone(tmp_path):
    """The state of a finished batch costs two reads, however many outputs and attempts it had."""
    from onceflow.core.ledger.storage import open_ledger_storage

    storage = open_ledger_storage(str(tmp_path))
    parts = participants("world", World())
    coord = Coordinator(storage, "p", parts)
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    coord.commit(plan.batch_seq)
    read = []
    original = LedgerStorage.read
    storage.read = lambda key: read.append(key) or original(storage, key)
    assert coord.batch(plan.batch_seq).state is S.COMMITTED and coord.is_committed(plan.batch_seq)
    assert [Path(k).name for k in read] == ["decision.json", "_batch.json"] * 2


def test_the_state_is_derived_in_one_place():
    """``derive_state`` is called by ``BatchRecords`` alone: no reader gathers the records itself."""
    src = Path(__import__("onceflow").__file__).parent
    callers = sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if re.search(r"\bderive_state\(", p.read_text())
                     and p.name != "states.py")
    assert callers == ["core/batch_view.py"]
