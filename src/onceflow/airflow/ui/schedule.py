"""What a pipeline's DAG promises about time, read from its serialized DAG (api-server): how
long a record should wait for its run, and how long a batch may sit unfinished. The health
rules (``ui.health``) judge a pipeline against these, not against one number for all."""

from __future__ import annotations

import pendulum
from airflow.timetables.base import TimeRestriction

from onceflow.airflow.dag_settings import spark_timeout_of
from onceflow.airflow.triggers.input_lag import InputLagTrigger
from onceflow.airflow.ui.health import Expected
from onceflow.config.input_schedule import ABORT_BACKOFF_S

_INPUT_TRIGGER = f"{InputLagTrigger.__module__}.{InputLagTrigger.__name__}"


def cron_period_s(timetable) -> float | None:
    """The time between the timetable's next two runs (None: it does not run on a clock)."""
    if not timetable.periodic:
        return None
    restriction = TimeRestriction(earliest=pendulum.now("UTC"), latest=None, catchup=True)
    first = timetable.next_dagrun_info(last_automated_data_interval=None, restriction=restriction)
    second = first and timetable.next_dagrun_info(last_automated_data_interval=first.data_interval, restriction=restriction)
    return (second.run_after - first.run_after).total_seconds() if second else None


def input_schedule_of(timetable) -> dict | None:
    """The ``when_input`` settings of an input-driven DAG (its InputLagTrigger's kwargs), or None."""
    condition = getattr(timetable, "asset_condition", None)
    if condition is None:
        return None
    for _key, asset in condition.iter_assets():
        for watcher in getattr(asset, "watchers", ()):
            trigger = watcher.trigger if isinstance(watcher.trigger, dict) else {}
            if trigger.get("classpath") == _INPUT_TRIGGER:
                return trigger["kwargs"]
    return None


def expected_of(dag, spec) -> Expected:
    """``dag``: the serialized DAG of pipeline ``spec``. A batch is stalled after the longest any
    task of the DAG may run (its spark task's timeout) plus the abort backoff: what the next
    run's plan waits before it recovers the batch (``input_schedule``'s ``stall_s`` default)."""
    timeouts = [t.execution_timeout for t in dag.tasks if t.execution_timeout]
    stall_s = max(timeouts, default=spark_timeout_of(spec)).total_seconds() + ABORT_BACKOFF_S
    watched = input_schedule_of(dag.timetable)
    if watched is not None:
        max_age = watched.get("max_age_s")
        return Expected(max_age, watched.get("stall_s") or stall_s,
                        f"when input: {watched.get('records') or '-'} records or {max_age or '-'} s")
    try:
        period = cron_period_s(dag.timetable)
    except Exception:  # a custom timetable that cannot answer here: judged without a cadence
        period = None
    return Expected(period, stall_s, getattr(dag.timetable, "description", "") or "")

