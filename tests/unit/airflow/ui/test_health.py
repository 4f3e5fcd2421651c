"""The pipeline list's health: the rule table row by row (pure logic), what a DAG promises about
time, the lag cache's bounded waits, and the list read from real ledgers on disk."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from onceflow.airflow.ui.health import (OVERDUE_FLOOR_S, RULES, WARN_FROM, Expected, PipelineHealth, age, findings,
                                        needs_person)
from onceflow.config.settings import ConfigurationError
from onceflow.core.ledger.errors import LedgerUnavailable
from onceflow.storage.local import LocalStorage
from tests.support import ROOT

NOW = 10_000_000_000
EVERY_5_MIN = Expected(cadence_s=300.0, stall_s=3_660.0, schedule="Every 5 minutes")


def batch(state: str = "committed", quiet_s: float = 10, **row) -> dict:
    """A latest-batch row as ``overview.page_row`` makes it; its last step ``quiet_s`` ago."""
    return {"batch": "0000000007", "batch_seq": 7, "state": state, "records": 10, "decision": None, "failed": {},
            "replay_of": None, "intervention": None, "open_transactions": [],
            "timings_ms": {"planned": NOW - int(quiet_s * 1000) - 5_000, "done": NOW - int(quiet_s * 1000)}, **row}


def health(latest: dict | None = None, expected: Expected = EVERY_5_MIN, **facts) -> PipelineHealth:
    return PipelineHealth("dag", "pipe", expected, NOW, latest if latest is not None else batch(), NOW - 60_000, **facts)


def rules_of(h: PipelineHealth) -> list[str]:
    return [f.rule for f in findings(h)]


def test_a_committed_pipeline_with_nothing_waiting_is_fine():
    h = health(records_behind=0)
    assert findings(h) == [] and not needs_person(findings(h))


def test_kafka_that_does_not_answer_needs_a_person_and_the_ledgers_part_is_still_judged():
    h = health(batch("aborted", replay_of=6), lag_error="Kafka did not answer within 3 s (KafkaException)",
               kafka_silent=True)
    assert rules_of(h) == ["kafka_silent", "replay_aborted"] and needs_person(findings(h))
    assert "records behind unknown" in findings(h)[0].says


def test_a_lag_that_failed_for_another_cause_than_kafka_is_not_called_kafka_silent():
    h = health(lag_error="the lag could not be read: ConfigurationError: no connection 'onceflow_kafka'")
    assert rules_of(h) == ["lag_unreadable"] and needs_person(findings(h))
    assert findings(h)[0].says.startswith("the lag could not be read: ConfigurationError")


def test_an_output_whose_commit_failed_needs_a_person_who_is_told_which_task_to_rerun():
    h = health(batch("committing", decision="COMMIT", failed={"out": {"detail": "fenced"}}), records_behind=0)
    (found,) = findings(h)
    assert found.rule == "failed" and found.needs_person
    assert "commit of out in batch 0000000007 failed" in found.says and "re-run the commit task" in found.says
    aborting = health(batch("aborting", decision="ABORT", failed={"out": {"detail": "x"}}), records_behind=0)
    assert "re-run the rollback task" in findings(aborting)[0].says


def test_an_unfinished_batch_is_stuck_only_once_it_recorded_nothing_for_longer_than_the_stall_time():
    for state in ("planned", "preparing", "prepared", "committing", "aborting"):
        assert rules_of(health(batch(state, quiet_s=3_600), records_behind=0)) == [], state
        assert rules_of(health(batch(state, quiet_s=3_700), records_behind=0)) == ["stuck"], state
    # a finished batch is never stuck, however old
    assert rules_of(health(batch("committed", quiet_s=86_400), records_behind=0)) == []


def test_open_transactions_past_the_warning_fraction_need_a_person():
    def txns(*used):
        return [{"used": u, "sink": "out"} for u in used]

    assert rules_of(health(batch("prepared", open_transactions=txns(0.2, WARN_FROM - 0.01)), records_behind=0)) == []
    h = health(batch("committing", open_transactions=txns(0.2, 0.62)), records_behind=0)
    assert rules_of(h) == ["near_timeout"] and h.worst_used == 0.62
    assert "2 open transactions of batch 0000000007, up to 62% of their timeout used" in findings(h)[0].says


def test_a_replay_that_aborted_too_needs_a_person_a_first_abort_or_an_intervened_one_does_not():
    first = health(batch("aborted"), records_behind=3)
    assert rules_of(first) == ["aborted"] and not needs_person(findings(first))
    assert "the next run replays it" in findings(first)[0].says
    again = health(batch("aborted", replay_of=6), records_behind=3)
    assert rules_of(again) == ["replay_aborted"] and needs_person(findings(again))
    split = health(batch("aborted", replay_of=6, intervention={"action": "split"}), records_behind=3)
    assert rules_of(split) == ["aborted"] and "follows the split or skip" in findings(split)[0].says


def test_records_waiting_over_three_schedule_periods_are_overdue_with_a_floor_for_short_periods():
    assert EVERY_5_MIN.cadence_s * 3 <= OVERDUE_FLOOR_S  # a 5-minute schedule is judged by the floor
    assert rules_of(health(records_behind=5, oldest_uncommitted_age_s=OVERDUE_FLOOR_S - 1)) == []
    late = health(records_behind=5, oldest_uncommitted_age_s=OVERDUE_FLOOR_S + 1)
    assert rules_of(late) == ["overdue"] and "over 3 schedule periods (15 min)" in findings(late)[0].says
    hourly = Expected(3_600.0, 3_660.0)
    assert rules_of(health(expected=hourly, records_behind=5, oldest_uncommitted_age_s=3 * 3_600 - 1)) == []
    assert rules_of(health(expected=hourly, records_behind=5, oldest_uncommitted_age_s=3 * 3_600 + 1)) == ["overdue"]
    # triggered by hand (no cadence): nothing is overdue; nothing waiting: nothing is overdue
    manual = Expected(None, 3_660.0)
    assert rules_of(health(expected=manual, records_behind=5, oldest_uncommitted_age_s=86_400)) == []
    assert rules_of(health(records_behind=0, oldest_uncommitted_age_s=None)) == []


def test_a_pending_answer_from_kafka_is_said_but_needs_no_one():
    h = health(lag_pending=True)
    assert rules_of(h) == ["lag_pending"] and not needs_person(findings(h))


def test_an_unreadable_ledger_needs_a_person():
    h = PipelineHealth("dag", "pipe", EVERY_5_MIN, NOW, ledger_error="PermissionError: denied")
    assert rules_of(h) == ["ledger_unreadable"] and needs_person(findings(h))


def test_no_batch_yet_is_fine_and_never_committed_has_no_commit_age():
    h = PipelineHealth("dag", "pipe", EVERY_5_MIN, NOW, records_behind=0)
    assert findings(h) == [] and h.last_commit_age_s is None and h.quiet_s is None


def test_every_rule_is_in_the_table_docs_ui_md_prints():
    doc = (ROOT / "docs" / "ui.md").read_text()
    for rule in RULES:
        assert f"| {rule.label} | {'yes' if rule.needs_person else 'no'} |" in doc, rule.name


def test_ages_read_as_a_person_says_them():
    assert [age(s) for s in (None, 42, 119, 900, 7_200, 3 * 86_400)] == ["-", "42 s", "119 s", "15 min", "2.0 h", "3.0 d"]


# -- what a DAG promises (its serialized form, as the api-server reads it) --------------------

def _serialized(schedule, **kw):
    from airflow.serialization.serialized_objects import DagSerialization

    from onceflow.airflow.dag_factory import pipeline_dag
    from tests.doubles.specs import ORDERS

    dag = pipeline_dag(ORDERS, warehouse="file:///w", schedule=schedule, dag_id="orders", **kw)
    return DagSerialization.from_dict(DagSerialization.to_dict(dag)), ORDERS


def test_a_cron_dag_promises_its_period_and_a_stall_time_of_its_longest_task_plus_the_abort_backoff():
    from datetime import timedelta

    from onceflow.airflow.ui.schedule import expected_of

    dag, spec = _serialized("*/5 * * * *", spark_timeout=timedelta(minutes=20))
    expected = expected_of(dag, spec)
    assert (expected.cadence_s, expected.stall_s) == (300.0, 20 * 60 + 60.0)
    daily, _ = _serialized("0 3 * * *")
    assert expected_of(daily, spec).cadence_s == 86_400.0


def test_an_input_driven_dag_promises_its_max_age_and_a_manual_one_no_cadence():
    from onceflow.airflow.ui.schedule import expected_of
    from onceflow.config.input_schedule import when_input

    dag, spec = _serialized(when_input(records=100, max_age_s=90, stall_s=600))
    assert (expected_of(dag, spec).cadence_s, expected_of(dag, spec).stall_s) == (90, 600)
    by_count, _ = _serialized(when_input(records=100))
    assert expected_of(by_count, spec).cadence_s is None
    manual, _ = _serialized(None)
    assert expected_of(manual, spec).cadence_s is None


# -- the lag cache ------------------------------------------------------------------------------

class SlowKafka:
    """input_lag's stand-in: answers when released, counts the questions."""

    def __init__(self, rows=None, error: Exception | None = None):
        self.release = threading.Event()
        self.asked = 0
        self.rows = rows if rows is not None else [{"lag": 4, "oldest_uncommitted_age_s": 30.0}]
        self.error = error

    def __call__(self, runtime, now, timeout_s):
        self.asked += 1
        assert self.release.wait(10)
        if self.error:
            raise self.error
        return self.rows


def test_the_list_waits_for_kafka_no_longer_than_it_chose_and_asks_one_question_at_a_time():
    from onceflow.airflow.ui.lag_cache import LagCache

    kafka, clock = SlowKafka(), SimpleNamespace(now=NOW)
    cache = LagCache(ttl_s=15, timeout_s=3, ask=kafka, clock=lambda: clock.now)
    first = cache.reading("p", None, wait_s=0.05)
    assert first.pending and first.records_behind is None
    assert cache.reading("p", None, wait_s=0.05).pending and kafka.asked == 1  # still the one question
    kafka.release.set()
    answered = cache.reading("p", None, wait_s=5)
    assert answered.records_behind == 4 and answered.asked_ms == NOW
    assert answered.oldest_uncommitted_age_s(NOW + 10_000) == 40.0  # the answer's age, grown since it was asked
    clock.now += 14_000
    assert cache.reading("p", None, wait_s=5).asked_ms == NOW and kafka.asked == 1  # fresh: not asked again
    clock.now += 2_000
    assert cache.reading("p", None, wait_s=5).asked_ms == NOW + 16_000 and kafka.asked == 2


def test_a_kafka_that_failed_is_shown_as_failed_and_asked_again_after_a_short_wait_not_at_every_look():
    from onceflow.airflow.ui.lag_cache import LagCache

    kafka, clock = SlowKafka(error=TimeoutError("no broker")), SimpleNamespace(now=NOW)
    kafka.release.set()
    cache = LagCache(ttl_s=15, timeout_s=3, ask=kafka, clock=lambda: clock.now, retry_s=3)
    failed = cache.reading("p", None, wait_s=5)
    assert failed.error == "Kafka did not answer within 3 s (TimeoutError)" and failed.records_behind is None
    kafka.error = None
    clock.now += 1_000
    assert cache.reading("p", None, wait_s=5).error and kafka.asked == 1  # the failure kept: no question per look
    clock.now += 2_000
    assert cache.reading("p", None, wait_s=5).records_behind == 4 and kafka.asked == 2


def test_an_error_kafka_answered_with_is_said_as_it_is_and_not_taken_for_silence():
    from onceflow.airflow.ui.lag_cache import LagCache

    for code, silent in ((KafkaError.UNKNOWN_TOPIC_OR_PART, False), (KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
                         (KafkaError._TIMED_OUT, True), (KafkaError._TRANSPORT, True)):
        kafka = SlowKafka(error=KafkaException(KafkaError(code)))
        kafka.release.set()
        failed = LagCache(ask=kafka, clock=lambda: NOW).reading("p", None, wait_s=5)
        assert failed.kafka_silent is silent and failed.records_behind is None, (code, failed.error)
        if silent:
            assert failed.error == "Kafka did not answer within 3 s (KafkaException)"
        else:
            assert failed.error.startswith("Kafka answered the lag's question with an error: ")
            assert f"({KafkaError(code).name()})" in failed.error
            assert rules_of(health(lag_error=failed.error, kafka_silent=failed.kafka_silent)) == ["lag_unreadable"]


def test_a_failure_that_is_not_kafkas_is_not_blamed_on_kafka():
    from onceflow.airflow.ui.lag_cache import LagCache

    kafka = SlowKafka(error=KeyError("batch 0000000007"))
    kafka.release.set()
    failed = LagCache(ask=kafka, clock=lambda: NOW).reading("p", None, wait_s=5)
    assert failed.error == "the lag could not be read: KeyError: 'batch 0000000007'"


# -- the list, from real ledgers ------------------------------------------------------------------

def _listed(tmp_path, name: str, runs: int, abort_last: bool = False):
    from onceflow.airflow.ui.listing import Listed
    from onceflow.core.ledger.storage import open_ledger_storage
    from tests.doubles.helpers import config, prepare_all, run_batch, source, world_coordinator

    coord, _world, parts = world_coordinator(open_ledger_storage(str(tmp_path / name)), pipeline=name)
    for _ in range(runs):
        run_batch(coord, parts, source(10_000))
    if abort_last:
        plan = coord.plan_next(source(10_000), config())
        prepare_all(coord, parts, plan)
        coord.rollback(plan.batch_seq, "the spark task failed")
    spec = SimpleNamespace(name=name, sinks=[])
    return Listed(f"dag_{name}", name, lambda: SimpleNamespace(reader=coord, spec=spec), EVERY_5_MIN), coord


def test_the_list_reads_each_latest_batch_and_the_newest_commit_without_listing_a_ledger(tmp_path, monkeypatch):
    from onceflow.airflow.ui import listing
    from onceflow.airflow.ui.lag_cache import LagCache
    from onceflow.core.ledger.storage import LedgerStorage

    monkeypatch.setattr(LedgerStorage, "list", lambda *a, **k: (_ for _ in ()).throw(AssertionError("listed a ledger")))
    monkeypatch.setattr(listing, "LAG", LagCache(ask=lambda runtime, now, timeout_s: [{"lag": 0, "oldest_uncommitted_age_s": None}]))
    healthy, _ = _listed(tmp_path, "healthy", 3)
    aborted, coord = _listed(tmp_path, "aborted", 2, abort_last=True)
    empty, _ = _listed(tmp_path, "empty", 0)

    def broken():
        raise PermissionError("the warehouse said no")

    unreadable = listing.Listed("dag_unreadable", "unreadable", broken, EVERY_5_MIN)
    rows, timing = listing.pipeline_list([healthy, aborted, empty, unreadable])
    by_dag = {r["dag_id"]: r for r in rows}
    assert [r["dag_id"] for r in rows] == ["dag_healthy", "dag_aborted", "dag_empty", "dag_unreadable"]
    assert by_dag["dag_healthy"]["latest"]["state"] == "committed" and by_dag["dag_healthy"]["findings"] == []
    assert by_dag["dag_healthy"]["records_behind"] == 0 and by_dag["dag_healthy"]["last_commit_age_s"] is not None
    # the latest batch aborted: the last commit is batch 2's
    assert by_dag["dag_aborted"]["latest"]["state"] == "aborted"
    assert by_dag["dag_aborted"]["last_commit_ms"] == coord.committed_at_ms(2)
    assert [f["rule"] for f in by_dag["dag_aborted"]["findings"]] == ["aborted"]
    assert by_dag["dag_empty"]["latest"] is None and by_dag["dag_empty"]["last_commit_ms"] is None
    assert by_dag["dag_unreadable"]["needs_person"] and "the warehouse said no" in by_dag["dag_unreadable"]["ledger_error"]
    assert set(timing) == {"ledger", "kafka", "total"}


@pytest.mark.parametrize("failure, rule", [(KafkaException(KafkaError(KafkaError._TIMED_OUT)), "kafka_silent"),
                                           (ConfigurationError("no connection 'onceflow_kafka'"), "lag_unreadable"),
                                           (LedgerUnavailable("ledger storage unusable"), "lag_unreadable")])
def test_the_list_names_a_lag_failure_for_its_cause(tmp_path, monkeypatch, failure, rule):
    from onceflow.airflow.ui import listing
    from onceflow.airflow.ui.lag_cache import LagCache

    def fails(runtime, now, timeout_s):
        raise failure

    monkeypatch.setattr(listing, "LAG", LagCache(ask=fails))
    healthy, _ = _listed(tmp_path, "healthy", 1)
    (row,), _ = listing.pipeline_list([healthy])
    assert [f["rule"] for f in row["findings"]] == [rule] and row["kafka_silent"] is (rule == "kafka_silent")
    assert row["latest"]["state"] == "committed" and row["records_behind"] is None


class CountingStorage(LocalStorage):
    """The local file storage, counting the files read and refusing to list."""

    def __init__(self):
        self.reads = 0

    def read_bytes(self, path: str) -> bytes | None:
        self.reads += 1
        return super().read_bytes(path)

    def list_tree(self, path: str):
        raise AssertionError(f"listed {path}")


def _aborted_after_a_commit(root, aborted: int):
    """A ledger on local files: one committed batch, then ``aborted`` batches that aborted."""
    from onceflow.core.ledger.storage import LedgerStorage
    from tests.doubles.helpers import config, prepare_all, run_batch, source, world_coordinator

    storage = CountingStorage()
    coord, _world, parts = world_coordinator(LedgerStorage(storage, str(root)))
    run_batch(coord, parts, source(10_000))
    for _ in range(aborted):
        plan = coord.plan_next(source(10_000), config())
        prepare_all(coord, parts, plan)
        coord.rollback(plan.batch_seq, "the spark task failed")
    return coord, storage


def test_the_last_commit_costs_the_same_reads_after_3_or_60_aborted_batches(tmp_path):
    from onceflow.airflow.ui.listing import Listed, ledger_health
    from onceflow.core.ledger.records import Head

    reads, found = {}, {}
    for aborted in (3, 60):
        coord, storage = _aborted_after_a_commit(tmp_path / str(aborted), aborted)
        runtime = SimpleNamespace(reader=coord, spec=SimpleNamespace(name="pipe", sinks=[]))
        listed = Listed("dag", "pipe", lambda: runtime, EVERY_5_MIN)
        storage.reads = 0
        found[aborted] = ledger_health(runtime, listed, NOW)
        reads[aborted] = storage.reads
        assert found[aborted].state == "aborted" and found[aborted].latest["batch_seq"] == aborted + 1
        committed_at = coord.committed_at_ms(1)
        assert found[aborted].last_commit_ms == committed_at is not None
        # without the head's hint of the last commit (a lost write), still the true one, at the same cost
        coord.ledger.write_head(Head(latest_seq=aborted + 1, last_committed_seq=0))
        storage.reads = 0
        assert ledger_health(runtime, listed, NOW).last_commit_ms == committed_at
        assert storage.reads == reads[aborted]
    assert reads[3] == reads[60] <= 20, reads


def test_a_plan_that_does_not_name_the_last_commit_is_walked_down_from(tmp_path):
    from dataclasses import replace

    coord, _storage = _aborted_after_a_commit(tmp_path, 3)
    older = replace(coord.plan(4), committed_before=None)  # as a plan written before the fact
    assert coord.committed_below(older) == 1 and coord.newest_committed_seq(4) == 1


def test_the_list_shows_a_kept_answer_at_once_and_waits_only_for_pipelines_kafka_never_answered(tmp_path, monkeypatch):
    import time

    from onceflow.airflow.ui import listing
    from onceflow.airflow.ui.lag_cache import LagCache

    kafka, clock = SlowKafka(), SimpleNamespace(now=NOW)
    kafka.release.set()
    monkeypatch.setattr(listing, "LAG", LagCache(ttl_s=15, ask=kafka, clock=lambda: clock.now))
    monkeypatch.setattr(listing, "LIST_LAG_WAIT_S", 30.0)
    healthy, _ = _listed(tmp_path, "healthy", 1)
    assert listing.pipeline_list([healthy])[0][0]["records_behind"] == 4  # no answer yet: waited for
    kafka.release.clear()  # Kafka now hangs
    clock.now += 20_000  # the answer is stale: asked again
    started = time.monotonic()
    (row,), _ = listing.pipeline_list([healthy])
    assert time.monotonic() - started < 10
    while kafka.asked < 2 and time.monotonic() - started < 10:  # the question goes out on the cache's own thread
        time.sleep(0.01)
    assert kafka.asked == 2
    assert row["records_behind"] == 4 and not row["lag_pending"]  # the answer kept, shown while Kafka is asked
    kafka.release.set()


@pytest.mark.parametrize("committed, expected", [(0, 0), (3, 3)])
def test_the_newest_committed_batch_is_found_below_unfinished_ones(tmp_path, committed, expected):
    from onceflow.core.ledger.storage import open_ledger_storage
    from tests.doubles.helpers import config, run_batch, source, world_coordinator

    coord, _world, parts = world_coordinator(open_ledger_storage(str(tmp_path)))
    for _ in range(committed):
        run_batch(coord, parts, source(10_000))
    coord.plan_next(source(10_000), config())  # planned, not run
    assert coord.newest_committed_seq() == expected
    assert (coord.committed_at_ms(expected) is not None) == bool(expected)
