"""When the input-driven schedule starts a run (pure logic of InputLagTrigger's decision)."""

from __future__ import annotations

import pytest

from onceflow.config.input_schedule import InputState, reason_to_fire, when_input
from onceflow.config.settings import ConfigurationError

SCHEDULE = when_input(records=500, max_age_s=60, stall_s=600)


def state(waiting=0, oldest=None, latest=3, in_flight=None, aborted=None) -> InputState:
    return InputState(waiting, oldest, latest, in_flight, aborted)


def test_a_run_starts_on_enough_records_or_an_old_enough_record_not_before():
    assert reason_to_fire(SCHEDULE, state(), None, None) is None
    assert reason_to_fire(SCHEDULE, state(499, 59.0), None, None) is None
    assert reason_to_fire(SCHEDULE, state(500, 1.0), None, None) == "500 records wait (threshold 500)"
    assert "is 60 s old" in reason_to_fire(SCHEDULE, state(3, 60.0), None, None)
    assert reason_to_fire(when_input(records=10, stall_s=600), state(9, 3600.0), None, None) is None
    assert reason_to_fire(when_input(max_age_s=5, stall_s=600), state(10_000, 1.0), None, None) is None


def test_the_age_rule_fires_early_by_the_time_the_last_run_it_started_took_to_commit():
    from onceflow.config.input_schedule import LastFiring

    schedule = when_input(max_age_s=8, stall_s=600)
    lead = LastFiring()
    assert lead.lead_s == 0.0  # nothing seen yet: the whole max_age_s
    assert reason_to_fire(schedule, state(100, 7.9), None, None, lead.lead_s) is None
    lead.fired(state(100, 8.0, latest=3), now=100.0)
    lead.looked(state(0, None, latest=4, in_flight=1.0), now=101.5)  # its batch, not yet committed
    assert lead.lead_s == 0.0
    lead.looked(state(0, None, latest=4), now=102.8)  # committed: 2.8 s after the trigger's event
    assert lead.lead_s == pytest.approx(2.8)
    assert reason_to_fire(schedule, state(100, 5.1, latest=4), 3, 10.0, lead.lead_s) is None
    assert "less the 2.8 s the last run took to commit" in reason_to_fire(schedule, state(100, 5.3, latest=4), 3, 10.0, lead.lead_s)
    lead.looked(state(0, None, latest=5), now=200.0)  # a batch it did not start measures nothing
    assert lead.lead_s == pytest.approx(2.8)

    lead.fired(state(100, 8.0, latest=5), now=300.0)
    lead.looked(state(0, None, latest=6), now=320.0)  # a run slower than max_age_s: the next starts on any record
    assert reason_to_fire(schedule, state(1, 0.0, latest=6), 5, 30.0, lead.lead_s) is not None
    assert reason_to_fire(schedule, state(0, None, latest=6), 5, 30.0, lead.lead_s) is None  # but not on none
    lead.fired(state(100, 8.0, latest=6), now=400.0)
    lead.looked(state(100, 1.0, latest=7, aborted=1.0), now=401.0)  # aborted: not a measure
    lead.looked(state(0, None, latest=8), now=500.0)
    assert lead.lead_s == pytest.approx(20.0)


def test_no_run_starts_while_a_batch_is_on_its_way_or_the_run_it_started_has_not_planned_yet():
    assert reason_to_fire(SCHEDULE, state(900, 100.0, in_flight=30.0), None, None) is None
    # It fired after batch 3: until batch 4 is planned, no second run.
    assert reason_to_fire(SCHEDULE, state(900, 100.0, latest=3), 3, 5.0) is None
    assert reason_to_fire(SCHEDULE, state(900, 100.0, latest=4), 3, 20.0) is not None


def test_a_stalled_run_or_batch_holds_the_next_run_back_only_so_long():
    # The run it started never planned (failed before planning), or a batch stays undecided:
    # after stall_s a run starts anyway, and its plan task recovers what is left.
    assert reason_to_fire(SCHEDULE, state(900, 700.0, latest=3), 3, 600.0) is not None
    assert reason_to_fire(SCHEDULE, state(900, 700.0, in_flight=601.0), None, None) is not None


def test_after_an_aborted_batch_the_replay_waits_a_little():
    assert reason_to_fire(SCHEDULE, state(900, 100.0, aborted=10.0), None, None) is None
    assert reason_to_fire(SCHEDULE, state(900, 100.0, aborted=61.0), None, None) is not None


def test_a_schedule_without_a_threshold_or_with_a_negative_one_is_refused():
    with pytest.raises(ConfigurationError, match="needs records=N, max_age_s=T or both"):
        when_input().check("orders")
    with pytest.raises(ConfigurationError, match=r"when_input\(poll_s=0\) must be positive"):
        when_input(records=5, poll_s=0).check("orders")


def test_the_environment_spells_the_input_schedule_and_a_misspelt_one_is_refused():
    from onceflow.config.input_schedule import parse_schedule

    assert parse_schedule("input: records=1000, max_age_s=30") == when_input(records=1000, max_age_s=30.0)
    assert parse_schedule("INPUT:max_age_s=5,poll_s=1") == when_input(max_age_s=5.0, poll_s=1.0)
    assert parse_schedule(" none ") is None
    assert parse_schedule("@hourly") == "@hourly" and parse_schedule("*/5 * * * *") == "*/5 * * * *"
    with pytest.raises(ConfigurationError, match="'record=10' is not one of records=<number>"):
        parse_schedule("input: record=10")
    with pytest.raises(ConfigurationError, match="max_age_s='soon' is not a number"):
        parse_schedule("input: max_age_s=soon")


def test_the_trigger_keeps_one_consumer_for_its_looks_and_replaces_it_after_a_failed_look():
    import asyncio
    from types import SimpleNamespace

    from onceflow.airflow.triggers.input_lag import InputLagTrigger

    opened, closed, looks = [], [], []

    class Source:
        def close(self):
            closed.append(self)

    def offset_source(timeout_s):
        opened.append(Source())
        return opened[-1]

    runtime = SimpleNamespace(spec=SimpleNamespace(name="p"), offset_source=offset_source)

    class Looking(InputLagTrigger):
        def _runtime(self):
            return runtime

        def look(self, runtime, source):
            looks.append(source)
            if len(looks) == 3:
                raise ConnectionError("broker unreachable")
            return state(waiting=600 if len(looks) == 5 else 0)

    trigger = Looking(dag_id="d", spec_json="{}", warehouse="file:///w", kafka_conn_id="k", aws_conn_id=None,
                      records=500, max_age_s=None, poll_s=0.001, stall_s=60)

    async def first_event():
        events = trigger.run()
        event = await events.__anext__()
        await events.aclose()  # the triggerer cancels a trigger this way: its consumer is closed
        return event

    event = asyncio.run(first_event())
    assert event.payload["waiting"] == 600 and len(looks) == 5
    assert looks[:3] == [opened[0]] * 3 and looks[3:] == [opened[1]] * 2, "one consumer per stretch of good looks"
    assert closed == opened, "the failed look's consumer and, at the end, the second one are closed"
