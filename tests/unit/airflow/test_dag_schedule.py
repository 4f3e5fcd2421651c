"""The DAG's schedule from each of its four forms, for an offsets and an interval pipeline."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.timetables.interval import CronDataIntervalTimetable
from airflow.timetables.trigger import CronTriggerTimetable

from onceflow.airflow.dag_schedule import dag_schedule
from onceflow.airflow.dag_settings import dag_settings
from onceflow.config.input_schedule import ABORT_BACKOFF_S, when_input
from onceflow.config.settings import ConfigurationError
from tests.doubles.specs import ORDERS, ORDERS_HOURLY


def schedule_of(spec, schedule, **settings):
    return dag_schedule(dag_settings(spec, warehouse="file:///w", schedule=schedule, **settings))


def test_when_input_gives_an_offsets_pipeline_its_input_asset_watched_by_its_own_trigger():
    [asset] = schedule_of(ORDERS, when_input(records=10), dag_id="orders_staging", kafka_conn_id="kafka_prod",
                          aws_conn_id="s3_prod", spark_timeout=timedelta(minutes=10))
    assert (asset.name, asset.uri) == ("onceflow.orders_staging.input", "onceflow://orders_staging/input")
    assert asset.extra == {"topics": ["orders"], "kafka_conn_id": "kafka_prod"}
    [watcher] = asset.watchers
    _, kwargs = watcher.trigger.serialize()
    assert (kwargs["dag_id"], kwargs["warehouse"], kwargs["kafka_conn_id"], kwargs["aws_conn_id"]) == (
        "orders_staging", "file:///w", "kafka_prod", "s3_prod")
    # A run that planned nothing holds the next back for no longer than a batch may take, plus the backoff.
    assert (kwargs["records"], kwargs["max_age_s"], kwargs["stall_s"]) == (10, None, 600 + ABORT_BACKOFF_S)


def test_when_input_keeps_a_stall_time_it_is_given():
    [asset] = schedule_of(ORDERS, when_input(max_age_s=30, stall_s=45))
    assert asset.watchers[0].trigger.serialize()[1]["stall_s"] == 45


def test_when_input_without_a_threshold_is_refused():
    with pytest.raises(ConfigurationError, match=r"^pipeline 'orders': when_input\(\) needs records=N, max_age_s=T or both$"):
        schedule_of(ORDERS, when_input())


def test_when_input_is_refused_for_an_interval_pipeline_naming_the_batches_it_is_for():
    with pytest.raises(ConfigurationError) as refused:
        schedule_of(ORDERS_HOURLY, when_input(records=10))
    assert str(refused.value) == ("pipeline 'orders_hourly' reads data intervals: its runs follow its timetable, "
                                  "not its input; when_input() is for offsets pipelines")


def test_a_cron_expression_is_an_offsets_pipelines_schedule_as_it_is():
    assert schedule_of(ORDERS, "*/5 * * * *") == "*/5 * * * *"


def test_a_cron_expression_gives_an_interval_pipeline_data_intervals_in_utc():
    timetable = schedule_of(ORDERS_HOURLY, "@hourly")
    assert isinstance(timetable, CronDataIntervalTimetable)
    assert timetable.serialize() == CronDataIntervalTimetable("@hourly", timezone="UTC").serialize()


def test_none_leaves_an_offsets_pipeline_to_triggered_runs():
    assert schedule_of(ORDERS, None) is None


def test_none_is_refused_for_an_interval_pipeline_naming_the_fix():
    with pytest.raises(ConfigurationError) as refused:
        schedule_of(ORDERS_HOURLY, None)
    assert str(refused.value) == (
        "pipeline 'orders_hourly' reads data intervals (batches='interval'), so its DAG needs a schedule: give the "
        "spec (or pipeline_dag, or ONCEFLOW_SCHEDULE) a cron expression such as '@hourly', or a timetable"
    )


@pytest.mark.parametrize("spec", [ORDERS, ORDERS_HOURLY], ids=["offsets", "interval"])
def test_a_timetable_is_the_schedule_as_it_is(spec):
    timetable = CronTriggerTimetable("0 3 * * *", timezone="UTC")
    assert schedule_of(spec, timetable) is timetable
