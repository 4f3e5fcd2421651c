"""The schedule of a pipeline's DAG, from the form the pipeline gives it in (Airflow DAG-parsing time).

The form is ``pipeline_dag``'s ``schedule=``, else ``ONCEFLOW_SCHEDULE``, else the spec's (``dag_settings``):

| form given                          | offsets pipeline                   | interval pipeline                  |
| ----------------------------------- | ---------------------------------- | ---------------------------------- |
| ``when_input(...)``                 | the input's Asset (``input_asset``) | refused: its runs are its intervals |
| a cron expression (``"@hourly"``)   | as it is                           | a ``CronDataIntervalTimetable``    |
| ``None`` (triggered runs only)      | as it is                           | refused: its runs need intervals   |
| a timetable, or any other schedule  | as it is                           | as it is                           |
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetWatcher
from airflow.timetables.interval import CronDataIntervalTimetable

from onceflow.config.input_schedule import ABORT_BACKOFF_S, InputSchedule
from onceflow.config.settings import ConfigurationError
from onceflow.pipeline.spec import INTERVAL, OFFSETS
from onceflow.airflow.triggers.input_lag import InputLagTrigger

if TYPE_CHECKING:
    from onceflow.airflow.dag_settings import DagSettings


def dag_schedule(settings: DagSettings) -> Any:
    """What the DAG's ``schedule=`` takes, from ``settings.schedule`` in any of its four forms."""
    if isinstance(settings.schedule, InputSchedule):  # runs when data arrives: an Asset watched in the triggerer
        return [input_asset(settings, settings.schedule)]
    if settings.spec.batches == INTERVAL:
        return interval_schedule(settings.spec.name, settings.schedule)
    return settings.schedule


def input_asset(settings: DagSettings, schedule: InputSchedule):
    """The Asset standing for the DAG's input, watched by the pipeline's InputLagTrigger (one per DAG:
    two DAGs of one spec, say staging and production, each start only their own runs)."""
    spec, dag_id, deployed = settings.spec, settings.dag_id, settings.deployed
    if spec.batches != OFFSETS:
        raise ConfigurationError(f"pipeline {spec.name!r} reads data intervals: its runs follow its timetable, "
                                 "not its input; when_input() is for offsets pipelines")
    schedule.check(spec.name)
    if schedule.stall_s is None:
        schedule = replace(schedule, stall_s=settings.spark_timeout.total_seconds() + ABORT_BACKOFF_S)
    # The trigger needs none of the params (its kwargs are stored).
    trigger = InputLagTrigger(dag_id=dag_id, spec_json=spec.without_params().to_json(), warehouse=deployed.warehouse,
                              kafka_conn_id=deployed.kafka_conn_id, aws_conn_id=deployed.aws_conn_id,
                              records=schedule.records, max_age_s=schedule.max_age_s, poll_s=schedule.poll_s,
                              stall_s=schedule.stall_s)
    return Asset(name=f"onceflow.{dag_id}.input", uri=f"onceflow://{dag_id}/input", group="onceflow",
                 extra={"topics": list(spec.topics), "kafka_conn_id": deployed.kafka_conn_id},
                 watchers=[AssetWatcher(name=f"onceflow.{dag_id}.input_lag", trigger=trigger)])


def interval_schedule(pipeline: str, schedule: Any):
    """The schedule of an interval pipeline: one whose runs have data intervals.
    A cron expression becomes a ``CronDataIntervalTimetable`` in UTC (Airflow 3
    gives a bare cron string a trigger timetable, whose runs have no interval)."""
    if schedule is None:
        raise ConfigurationError(
            f"pipeline {pipeline!r} reads data intervals (batches='interval'), so its DAG needs a schedule: give the "
            "spec (or pipeline_dag, or ONCEFLOW_SCHEDULE) a cron expression such as '@hourly', or a timetable"
        )
    return CronDataIntervalTimetable(schedule, timezone="UTC") if isinstance(schedule, str) else schedule
