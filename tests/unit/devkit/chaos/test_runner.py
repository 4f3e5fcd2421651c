"""The chaos run's guard against a second run on the same home (pure logic: a file lock)."""

from __future__ import annotations

import pytest

from onceflow.config.settings import ConfigurationError
from onceflow_examples.clickstream import CLICKSTREAM_HOURLY

from onceflow.sinks import kinds as sink_kinds
from onceflow_devkit.chaos.runner import ChaosOptions, _fault_points, _Run, pipeline_spec


def test_a_second_run_on_the_same_home_fails_fast_and_a_run_beside_it_starts(tmp_path):
    # The second would stop the first one's stack and delete its state (its up() starts with that).
    first = _Run(ChaosOptions(1, 1, home=tmp_path / "chaos" / "noida-file"), print)
    first._hold_home()
    second = _Run(ChaosOptions(1, 1, home=tmp_path / "chaos" / "noida-file"), print)
    with pytest.raises(ConfigurationError, match="another chaos run is using .*noida-file .*same --broker and --warehouse"):
        second._hold_home()
    _Run(ChaosOptions(1, 1, broker="tansu", home=tmp_path / "chaos" / "tansu-file"), print)._hold_home()
    first.down()  # the first run ends (in this process: the next run of the combination must start)
    second._hold_home()


@pytest.mark.parametrize(("options", "dag_outputs", "drawn_kinds"), [
    (ChaosOptions(1, 1), {"files", "kafka", "iceberg"}, {"files", "kafka", "iceberg"}),
    (ChaosOptions(1, 1, postgres=True), {"files", "kafka", "iceberg", "postgres"}, {"files", "kafka", "iceberg", "postgres"}),
])
def test_the_points_drawn_are_those_of_the_outputs_the_run_s_dag_writes(options, dag_outputs, drawn_kinds):
    # One spec decides both: a point of a kind the DAG has no output of could never fire.
    spec = pipeline_spec(options)
    assert {sink.kind for sink in spec.sinks} == dag_outputs
    points = _fault_points(spec)
    drawn = {point.split(".", 1)[0] for point in points} & set(sink_kinds())
    assert drawn == drawn_kinds
    assert {"plan", "job", "commit", "abort", "ledger"} <= {point.split(".", 1)[0] for point in points}  # the protocol's own


def test_a_backfill_run_draws_from_the_hourly_dag_s_outputs():
    assert pipeline_spec(ChaosOptions(1, 1, mode="backfill")).name == CLICKSTREAM_HOURLY.name


def test_records_per_split_is_the_pipeline_s_and_the_run_says_how_to_reproduce_it():
    from onceflow_devkit.chaos.figures import ChaosFigures

    assert pipeline_spec(ChaosOptions(1, 1)).records_per_split is None
    assert pipeline_spec(ChaosOptions(1, 1, records_per_split=10_000, postgres=True)).records_per_split == 10_000
    figures = ChaosFigures("apache", "file", 7, [], spark="connect", records_per_split=10_000)
    assert figures.reproduce().endswith("--spark connect --records-per-split 10000")
    assert figures.to_dict()["records_per_split"] == 10_000


def test_without_a_plan_task_the_killed_task_processes_are_the_dag_s_and_the_run_says_how_to_reproduce_it():
    from onceflow_devkit.chaos import schedule
    from onceflow_devkit.chaos.figures import ChaosFigures

    def killed(tasks):
        faults = schedule.fault_sequence(5, 60, [schedule.KILL_TASK_PROCESS], tasks=tasks)
        return {f.detail["task"] for f in faults}

    assert killed(schedule.TASKS) == {"plan", "spark", "commit"}
    assert killed(schedule.PLANNING_IN_SPARK) == {"spark", "commit"}  # a plan task that does not exist is no fault
    figures = ChaosFigures("apache", "file", 7, [], spark="connect", plan_in_spark_task=True, records_per_partition=1000)
    assert figures.reproduce().endswith("--spark connect --plan-in-spark-task --records-per-partition 1000")
    assert figures.to_dict()["plan_in_spark_task"] is True and figures.to_dict()["records_per_partition"] == 1000
    assert "--records-per-partition" not in ChaosFigures("apache", "file", 7, []).reproduce()  # the default: 100
    with pytest.raises(ConfigurationError, match="--mode backfill runs the hourly DAG"):
        ChaosOptions(1, 1, mode="backfill", plan_in_spark_task=True).check()


def test_the_stop_signal_asks_a_run_to_stop_and_its_handler_goes_with_the_run():
    import os
    import signal

    from onceflow_devkit.chaos.runner import STOP_SIGNAL, _StopRequest

    before = signal.getsignal(STOP_SIGNAL)
    with _StopRequest() as stop:
        assert not stop.event.is_set()
        os.kill(os.getpid(), STOP_SIGNAL)
        assert stop.event.wait(5)
    assert signal.getsignal(STOP_SIGNAL) == before


def test_frozen_zombies_are_asked_for_by_name_and_only_where_a_job_has_workers_of_its_own():
    from onceflow_devkit.chaos import schedule

    ChaosOptions(30, 1, kinds=(schedule.FROZEN_ZOMBIE,)).check()
    assert schedule.FROZEN_ZOMBIE not in ChaosOptions(30, 1).possible_kinds(False)  # never a default kind
    for refused in (ChaosOptions(30, 1, spark="connect", kinds=(schedule.FROZEN_ZOMBIE,)),
                    ChaosOptions(30, 1, mode="backfill", kinds=(schedule.FROZEN_ZOMBIE,))):
        with pytest.raises(ConfigurationError, match="cannot happen"):
            refused.check()
