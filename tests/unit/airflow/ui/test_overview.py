"""What the onceflow page computes from the ledger: pure logic, fakes only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from onceflow.sinks.kafka.handle import TxnHandle
from onceflow.core.participant import Vote
from onceflow.core.states import BatchState
from onceflow.pipeline.spec import PipelineSpec, SinkSpec
from onceflow.airflow.ui.overview import WARN_FROM, batch_page, open_transactions
from onceflow.airflow.ui.pages import render
from tests.doubles.helpers import run_batch, source, world_coordinator

SPEC = PipelineSpec("p", ("in",), "m:f", (SinkSpec("out", "kafka", "out", transaction_timeout_ms=60_000), SinkSpec("files", "files", "f")))
START = 1_000_000


def _status(state: BatchState, done=()):
    handles = [TxnHandle("p", "out", "0000000003", split, "out", f"onceflow-p-out-{split}", 7, 0, START + split * 1000).to_dict()
               for split in range(2)]
    handles.append(TxnHandle("p", "out", "0000000003", 2, "out", "onceflow-p-out-2", 8, 0, 0).to_dict())  # wrote nothing
    votes = {"out": Vote("out", 3, 1, {"handles": handles}, 10), "files": Vote("files", 3, 1, {}, 10)}
    return SimpleNamespace(state=state, votes=votes, done={name: object() for name in done}, batch_id="0000000003")


def test_open_transactions_count_down_to_the_broker_abort_and_warn_from_half():
    found = open_transactions(_status(BatchState.PREPARED), SPEC, now=START + 30_000)
    assert [(t["split"], t["remaining_ms"], t["warning"]) for t in found] == [(0, 30_000, True), (1, 31_000, False)]
    assert found[0]["used"] == WARN_FROM and found[0]["deadline_ms"] == START + 60_000
    late = open_transactions(_status(BatchState.COMMITTING), SPEC, now=START + 90_000)
    assert [t["remaining_ms"] for t in late] == [0, 0] and all(t["used"] > 1 for t in late)


def test_no_transaction_is_open_once_its_output_is_committed_or_the_batch_is_finished():
    assert open_transactions(_status(BatchState.COMMITTING, done=("out",)), SPEC, now=START) == []
    assert open_transactions(_status(BatchState.ABORTING, done=("out",)), SPEC, now=START) == []
    for state in (BatchState.COMMITTED, BatchState.ABORTED, BatchState.PLANNED):
        assert open_transactions(_status(state), SPEC, now=START) == []
    # an abort not applied yet: the transactions are still open, counting down
    assert len(open_transactions(_status(BatchState.ABORTING), SPEC, now=START)) == 2


def test_batches_come_newest_first_a_page_at_a_time_without_listing_the_ledger(tmp_path, monkeypatch):
    from onceflow.core.ledger.storage import LedgerStorage, open_ledger_storage

    monkeypatch.setattr(LedgerStorage, "list", lambda *a, **k: (_ for _ in ()).throw(AssertionError("the page listed the ledger")))
    coord, _world, parts = world_coordinator(open_ledger_storage(str(tmp_path)))
    src = source(10_000)
    for _ in range(5):
        run_batch(coord, parts, src)
    runtime = SimpleNamespace(reader=coord, spec=SPEC)
    pages, before = [], None
    while True:
        page = batch_page(runtime, before=before, limit=2, now=START)
        pages.append([row["batch_seq"] for row in page["batches"]])
        if page["next_before"] is None:
            break
        before = page["next_before"]
    assert pages == [[5, 4], [3, 2], [1]]
    assert all(row["state"] == "committed" and row["open_transactions"] == [] for row in batch_page(runtime, now=START)["batches"])


def test_pages_escape_what_they_show():
    from onceflow.airflow.ui.health import Expected, PipelineHealth
    from onceflow.airflow.ui.listing import row

    evil = "<script>alert(1)</script>"
    listed = row(PipelineHealth(evil, "p", Expected(None, 60.0, evil), START, lag_error=evil))
    html = render("index.html", pipelines=[listed], needs_person=1, filtered=False)
    assert evil not in html and "&lt;script&gt;" in html


def test_dead_letters_are_the_records_of_the_outputs_the_spec_marks_so():
    from onceflow.airflow.ui.overview import dead_letters

    row = {"votes": {"out": 90, "errors": 10}}
    marked = PipelineSpec("p", ("in",), "m:f", (SinkSpec("out", "kafka", "out"), SinkSpec("errors", "kafka", "e", dead_letter=True)))
    assert dead_letters(row, marked) == 10
    assert dead_letters(row, SPEC) is None  # no output is marked: the page shows "-", not 0


def test_an_interval_batch_shows_its_data_interval_and_the_batch_it_replaces(tmp_path):
    from onceflow.core.planning.interval_planner import IntervalPlanner
    from onceflow.core.ledger.storage import open_ledger_storage
    from onceflow.core.planning.intervals import Interval
    from onceflow.core.batch_view import format_rows
    from onceflow.airflow.ui.overview import page_row
    from tests.doubles.helpers import config, prepare_all

    hour = 3_600_000
    coord, _world, parts = world_coordinator(open_ledger_storage(str(tmp_path)))
    planner = IntervalPlanner(coord, config(), grace_ms=0, pool=4)
    src = source(500, 500)  # record i of each partition is stamped 1000 + 10 * i
    interval = Interval(1000, 1000 + hour)
    for replace in (None, lambda: {"files": "replaced", "events": "republished"}):
        plan = planner.plan(src, interval, run_id="backfill__1970-01-01T01:00:00+00:00", reprocess=replace).plan
        prepare_all(coord, parts, plan)
        coord.commit(plan.batch_seq)
    row = page_row(coord.describe(plan.batch_seq), SPEC, now=START)
    assert (row["interval"], row["replaces"]) == ("1970-01-01T00:00:01Z/1970-01-01T01:00:01Z", 1)
    html = render("run.html", view={"dag_id": "p", "batch": row}, run_id=row["run_id"])
    assert "1970-01-01T00:00:01Z/1970-01-01T01:00:01Z" in html and "replaces 0000000001" in html
    assert "interval: 1970-01-01T00:00:01Z/1970-01-01T01:00:01Z" in format_rows([row])
    assert "replaces 0000000001: {'events': 'republished', 'files': 'replaced'}" in format_rows([row])


def test_records_withheld_as_too_large_for_their_topic_are_shown_beside_the_output():
    from onceflow.core.plan import OffsetRange, Plan
    from onceflow.core.batch_view import batch_row, format_rows

    status = SimpleNamespace(
        batch_id="0000000004", batch_seq=4, plan=Plan("p", 4, (OffsetRange("clicks", 0, 0, 12),)),
        state=BatchState.COMMITTED, attempt=1, missing_votes=(), decision=None, done={}, timings={}, intervention=None, failed={},
        votes={"out": Vote("out", 4, 1, {}, records=10, withheld=2), "files": Vote("files", 4, 1, {}, records=12)})
    row = batch_row(status)
    assert row["withheld"] == {"out": 2}
    assert "withheld (too large for the topic; in _onceflow/<pipeline>/withheld/): out 2" in format_rows([row])
    html = render("run.html", view={"dag_id": "p", "batch": {**row, "dead_letters": None, "stages_ms": {}}}, run_id="r")
    assert "out: 10 <span class=\"warn withheld\"" in html and "+2 withheld" in html


def test_an_operators_split_or_skip_is_shown_with_who_why_and_where_the_records_are():
    from onceflow.core.planning.interventions import Action, Intervention, QuarantinedRange
    from onceflow.core.plan import OffsetRange, Plan
    from onceflow.core.batch_view import batch_row, format_rows

    rng = OffsetRange("clicks", 0, 5, 9)
    skip = Intervention(3, Action.SKIP, "ana", "record v6 is poison", 1_700_000_000_000,
                        quarantine=(QuarantinedRange(rng, 4, "s3://b/wh/_onceflow/p/quarantine/0000000003/clicks/0-5-9.parquet"),))
    status = SimpleNamespace(
        batch_id="0000000003", batch_seq=3, plan=Plan("p", 3, (rng,), replay_of=2),
        state=BatchState.ABORTED, attempt=1, missing_votes=(), decision=None, done={}, timings={}, intervention=skip, votes={}, failed={})
    row = batch_row(status)
    text = format_rows([row])
    assert "skipped; quarantined: 4 in s3://b/wh/_onceflow/p/quarantine/0000000003/clicks/0-5-9.parquet, by ana" in text
    assert "record v6 is poison" in text
    following = SimpleNamespace(**{**vars(status), "batch_seq": 4, "batch_id": "0000000004", "intervention": None,
                                   "plan": Plan("p", 4, (), intervention=skip.note())})
    assert f"follows: {skip.note()}" in format_rows([batch_row(following)])
    html = render("run.html", view={"dag_id": "p", "batch": {**row, "dead_letters": None, "stages_ms": {}}}, run_id="r")
    assert "skipped, 4 records quarantined by ana: record v6 is poison" in html and "4 records in s3://b/wh/" in html


def test_an_output_whose_abort_failed_is_shown_with_what_its_sink_said(tmp_path):
    from onceflow.core.errors import AbortFailed
    from onceflow.core.ledger.storage import open_ledger_storage
    from onceflow.core.participant import Outcome, Result
    from onceflow.core.batch_view import batch_row
    from tests.doubles.helpers import config, prepare_all

    coord, _world, parts = world_coordinator(open_ledger_storage(str(tmp_path)))
    plan = coord.plan_next(source(), config())
    prepare_all(coord, parts, plan)
    parts["events"].abort_answer = Result(Outcome.FAILED, "split 3 is visible")
    with pytest.raises(AbortFailed):
        coord.rollback(plan.batch_seq, "spark task failed")
    row = batch_row(coord.describe(plan.batch_seq))
    html = render("run.html", view={"dag_id": "p", "batch": {**row, "dead_letters": None}}, run_id="r")
    assert "abort of events failed: split 3 is visible" in html
