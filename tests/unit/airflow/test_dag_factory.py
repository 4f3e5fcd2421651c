"""What the DAG factory builds, at parse time (the DAG in Airflow runs in tests/system/e2e)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy
import pytest

import onceflow
from onceflow.airflow.dag_factory import pipeline_dag
from onceflow.spark.shipping import SUBMIT_APPLICATION, code_zip, shipped_code
from onceflow.config.settings import ConfigurationError
from tests.doubles.specs import ORDERS, ORDERS_HOURLY
from tests.support import ROOT


@pytest.fixture(scope="module")
def dag():
    return pipeline_dag(ORDERS, warehouse="s3://lake/warehouse", dag_id="orders_unit")


def test_the_dag_is_plan_spark_then_commit_or_rollback_one_run_at_a_time(dag):
    assert sorted(dag.task_ids) == ["commit", "plan", "rollback", "spark"]
    assert dag.max_active_runs == 1
    assert dag.get_task("plan").downstream_task_ids == {"spark"}
    assert dag.get_task("spark").downstream_task_ids == {"commit", "rollback"}
    assert (dag.get_task("commit").trigger_rule, dag.get_task("rollback").trigger_rule) == ("all_success", "one_failed")
    # the protocol tasks announce committed batches through one alias (no event for an aborted batch)
    for task_id in ("plan", "commit", "rollback"):
        assert [a.name for a in dag.get_task(task_id).outlets] == ["onceflow.orders"]
    assert dag.get_task("spark").outlets == []


def test_without_a_plan_task_the_spark_task_plans_and_announces_and_commit_and_rollback_read_its_plan():
    from onceflow.airflow.deployed import DeployedPipeline

    dag = pipeline_dag(ORDERS, warehouse="s3://lake/warehouse", dag_id="orders_planned_in_spark",
                       plan_in_spark_task=True)
    assert sorted(dag.task_ids) == ["commit", "rollback", "spark"]
    spark = dag.get_task("spark")
    assert spark.plans and spark.upstream_task_ids == set()
    assert spark.downstream_task_ids == {"commit", "rollback"}
    assert {dag.get_task(t).plan_task_id for t in ("commit", "rollback")} == {"spark"}
    # what its plan's recovery finishes, it announces, as the plan task does
    assert [a.name for a in spark.outlets] == ["onceflow.orders"] == [a.name for a in spark.inlets]
    # the onceflow page finds the pipeline in either shape: on the commit task
    assert DeployedPipeline.from_doc(dag.dag_id, dag.get_task("commit").doc_json).spec.name == "orders"
    assert not pipeline_dag(ORDERS, warehouse="s3://lake/warehouse", dag_id="orders_two").get_task("spark").plans


def test_the_spark_task_submits_the_installed_application_and_ships_onceflow_and_the_transform(dag):
    spark = dag.get_task("spark")
    assert Path(spark.application) == SUBMIT_APPLICATION and SUBMIT_APPLICATION.is_file()
    assert SUBMIT_APPLICATION.parent.parent == Path(onceflow.__file__).parent  # inside the installed package
    library, transform = spark.py_files.split(",")
    library_names = zipfile.ZipFile(library).namelist()
    assert "onceflow/spark/submit.py" in library_names
    assert not [n for n in library_names if not n.startswith("onceflow/")]
    assert "tests/doubles/specs.py" in zipfile.ZipFile(transform).namelist()


def test_the_spec_reaches_the_driver_in_its_environment_at_run_time_never_as_an_argument_or_a_template(monkeypatch):
    """The spec's params may hold a token: arguments show in ps and the task log, template fields in the UI
    (the run through Airflow: tests/system/e2e/test_clickstream_api.py)."""
    from dataclasses import replace

    from onceflow.pipeline.spec import PipelineSpec
    from onceflow.spark.shipping import SPEC_VAR

    spec = replace(ORDERS, params={"token": "s3cr3t-in-the-params"})
    spark = pipeline_dag(spec, warehouse="file:///w", dag_id="orders_with_token").get_task("spark")
    assert spark.application_args == ["--pipeline", "orders"]  # the batch is added at run time
    assert not [name for name in spark.template_fields if "s3cr3t" in json.dumps(getattr(spark, name), default=str)]
    monkeypatch.setenv("AIRFLOW_CONN_ONCEFLOW_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    assert PipelineSpec.from_json(spark.submitted_env()[SPEC_VAR]) == spec


def test_secrets_reach_the_driver_as_templates_of_the_connections_never_as_values(dag):
    env = dag.get_task("spark").env_vars
    assert env["AWS_ACCESS_KEY_ID"] == "{{ conn.onceflow_s3.login }}"
    assert env["AWS_SECRET_ACCESS_KEY"] == "{{ conn.onceflow_s3.password }}"
    assert "aws_session_token" in env["AWS_SESSION_TOKEN"]
    # No default region or endpoint: what the connection lacks stays empty and fails in the driver, naming it.
    assert "us-east-1" not in json.dumps(env) and "amazonaws" not in json.dumps(env)


def test_the_spark_task_may_sign_in_to_kafka_as_a_principal_of_its_own(dag):
    assert dag.get_task("spark").env_vars["ONCEFLOW_KAFKA_CONFIG"] == "{{ conn.onceflow_kafka.extra }}"
    own = pipeline_dag(ORDERS, warehouse="file:///data/w", dag_id="orders_writer", spark_kafka_conn_id="kafka_writer")
    env = own.get_task("spark").env_vars
    assert env["ONCEFLOW_KAFKA_CONFIG"] == "{{ conn.kafka_writer.extra }}"
    assert env["ONCEFLOW_KAFKA_BOOTSTRAP"] == "{{ conn.kafka_writer.extra_dejson['bootstrap.servers'] }}"
    assert own.get_task("commit").kafka_conn_id == "onceflow_kafka"  # the deciding side keeps the pipeline's


def test_a_file_warehouse_gives_the_driver_no_aws_settings():
    env = pipeline_dag(ORDERS, warehouse="file:///data/w", dag_id="orders_file").get_task("spark").env_vars
    assert not [k for k in env if k.startswith("AWS_")]


def test_no_warehouse_names_the_setting(monkeypatch):
    monkeypatch.delenv("ONCEFLOW_WAREHOUSE", raising=False)
    with pytest.raises(ConfigurationError, match="no warehouse.*ONCEFLOW_WAREHOUSE"):
        pipeline_dag(ORDERS)


def test_code_is_zipped_once_per_content_and_a_missing_package_is_named(tmp_path, monkeypatch):
    assert code_zip("onceflow.pipeline.spec") == code_zip("onceflow") == shipped_code(ORDERS)[0]
    (tmp_path / "lone_transform.py").write_text("def transform(df, batch_id):\n    return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert zipfile.ZipFile(code_zip("lone_transform")).namelist() == ["lone_transform.py"]
    with pytest.raises(ConfigurationError, match="no importable module or package 'no_such_package'"):
        code_zip("no_such_package.transforms")


def test_the_spark_task_stops_when_its_votes_could_no_longer_commit(dag):
    """A Kafka vote older than half its transaction timeout is refused by the commit: the spark
    task is given no longer than that, so a stuck job fails and the rollback frees the run slot."""
    from datetime import timedelta

    shortest = min(s.transaction_timeout_ms for s in ORDERS.sinks if s.kind == "kafka")
    assert dag.get_task("spark").execution_timeout == timedelta(milliseconds=shortest / 2)


def test_a_files_only_pipeline_gets_the_default_bound_and_an_explicit_one_wins():
    import dataclasses
    from datetime import timedelta

    from onceflow.airflow.dag_settings import DEFAULT_SPARK_TIMEOUT

    files_only = dataclasses.replace(ORDERS, sinks=tuple(s for s in ORDERS.sinks if s.kind == "files"))
    assert pipeline_dag(files_only, warehouse="file:///w", dag_id="f1").get_task("spark").execution_timeout == DEFAULT_SPARK_TIMEOUT
    explicit = pipeline_dag(files_only, warehouse="file:///w", dag_id="f2", spark_timeout=timedelta(hours=5))
    assert explicit.get_task("spark").execution_timeout == timedelta(hours=5)


def test_a_connection_without_keys_leaves_the_workers_own_aws_settings_alone(dag, monkeypatch):
    """Rendered from an S3 connection without login/password or region, the spark task's
    environment sets no AWS_* variable at all: the driver keeps the worker's credential chain."""
    from onceflow.airflow.operators.spark import OnceflowSparkSubmitOperator, set_env_only

    spark = dag.get_task("spark")
    assert isinstance(spark, OnceflowSparkSubmitOperator)
    rendered = {k: ("" if k.startswith("AWS_") else v) for k, v in spark.env_vars.items()}
    kept = set_env_only(rendered)
    assert not [k for k in kept if k.startswith("AWS_")] and kept["ONCEFLOW_WAREHOUSE"] == "s3://lake/warehouse"


def test_a_committed_batch_is_announced_with_what_it_committed_on_each_output():
    from types import SimpleNamespace

    from onceflow.airflow.assets import announce
    from onceflow.core.participant import Vote
    from onceflow.core.plan import OffsetRange, Plan

    status = SimpleNamespace(pipeline="orders", batch_id="0000000004", batch_seq=4, plan=Plan(
        "orders", 4, (OffsetRange("orders", 0, 10, 20),), replay_of=3),
        votes={s.name: Vote(s.name, 4, 1, {}, n) for s, n in zip(ORDERS.sinks, (2, 2, 9, 1))})
    added = []
    events = {"onceflow.orders": SimpleNamespace(add=lambda asset, extra: added.append((asset.name, extra)))}
    announce(_ByName(events), ORDERS, "file:///w", status)
    assert [name for name, _ in added] == [f"onceflow.orders.{s.name}" for s in ORDERS.sinks]
    extra = added[0][1]
    assert extra["batch_id"] == "0000000004" and extra["replay_of"] == 3 and extra["records_in"] == 10
    assert extra["ranges"] == [{"topic": "orders", "partition": 0, "start": 10, "end": 20}]
    assert extra["records_out"] == {"daily_revenue": 2, "orders_clean": 9, "orders_dead_letter": 1, "revenue_table": 2}


class _ByName(dict):
    """outlet_events as the task context has it: keyed by the alias."""

    def __getitem__(self, alias):
        return dict.__getitem__(self, alias.name)


def test_an_interval_pipeline_gets_data_intervals_and_may_run_side_by_side():
    from airflow.timetables.interval import CronDataIntervalTimetable


    dag = pipeline_dag(ORDERS_HOURLY, warehouse="file:///w", schedule="@hourly", dag_id="hourly_unit",
                       max_active_runs=3, catchup=True)
    assert isinstance(dag.timetable, CronDataIntervalTimetable)  # a bare cron string would give runs no interval
    assert (dag.max_active_runs, dag.catchup) == (3, True)
    assert "replace_committed" in dag.params and "max_records_per_partition" not in dag.params
    with pytest.raises(ConfigurationError, match=r"reads data intervals.*needs a schedule.*'@hourly'"):
        pipeline_dag(ORDERS_HOURLY, warehouse="file:///w", schedule=None, dag_id="hourly_manual")


def test_an_offsets_pipeline_refuses_more_than_one_run_at_a_time_naming_interval_batches():
    with pytest.raises(ConfigurationError, match=r"max_active_runs=2 needs batches=.interval."):
        pipeline_dag(ORDERS, warehouse="file:///w", dag_id="two_at_once", max_active_runs=2)


@pytest.mark.parametrize("catchup", [True, 1, "true", numpy.True_], ids=["True", "1", "'true'", "numpy.True_"])
def test_an_offsets_pipeline_refuses_catchup_whatever_true_value_says_so_naming_the_setting(catchup):
    # True == 1 and numpy.True_ == 1: a rule written as "False or 1" let each of them through.
    with pytest.raises(ConfigurationError, match=r"catchup=.* needs batches=.interval."):
        pipeline_dag(ORDERS, warehouse="file:///w", dag_id="catching_up", catchup=catchup)


def test_an_offsets_pipeline_takes_one_run_at_a_time_and_no_catchup_when_said_so():
    dag = pipeline_dag(ORDERS, warehouse="file:///w", dag_id="said_so", max_active_runs=1, catchup=False)
    assert (dag.max_active_runs, dag.catchup) == (1, False)


def test_the_input_schedule_from_the_environment_watches_the_dags_own_asset_with_a_trigger_that_survives_storage(monkeypatch):
    # The triggerer rebuilds the trigger from what serialize() stored: the same trigger, with plain
    # values only, and without the spec's free-form params.
    from dataclasses import replace

    import importlib

    monkeypatch.setenv("ONCEFLOW_SCHEDULE", "input: records=1000, max_age_s=30")
    spec = replace(ORDERS, params={"api_token": "not-for-the-trigger-table"})
    dag = pipeline_dag(spec, warehouse="file:///w", dag_id="on_input_unit")
    [asset] = dag.timetable.asset_condition.objects
    assert asset.name == "onceflow.on_input_unit.input"
    [watcher] = asset.watchers
    classpath, kwargs = watcher.trigger.serialize()
    assert json.loads(json.dumps(kwargs)) == kwargs
    assert (kwargs["records"], kwargs["max_age_s"], kwargs["dag_id"]) == (1000, 30.0, "on_input_unit")
    assert "not-for-the-trigger-table" not in json.dumps(kwargs)
    module, _, name = classpath.rpartition(".")
    assert getattr(importlib.import_module(module), name)(**kwargs).serialize() == (classpath, kwargs)


PARSE_PROBE = """
import json, runpy, sys
import airflow.sdk, airflow.sdk.execution_time.task_runner  # what every task process has before it parses
before = set(sys.modules)
for path in sys.argv[1:]:
    runpy.run_path(path)
print(json.dumps(sorted({m.split(".")[0] for m in set(sys.modules) - before})))
"""
# Client libraries a batch needs on the worker or the driver, never to parse its DAG.
CLIENT_LIBRARIES = {"confluent_kafka", "kafka", "pyarrow", "pyiceberg", "pyspark", "boto3", "botocore"}


def test_parsing_the_dag_files_imports_no_client_library(tmp_path):
    # Every task parses its DAG file first, and the DAG processor every file again and again.
    dags = sorted(str(p) for p in (ROOT / "dags").glob("*.py"))
    env = {"PATH": "", "ONCEFLOW_WAREHOUSE": f"file://{tmp_path}", "AIRFLOW_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", PARSE_PROBE, *dags], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = set(json.loads(done.stdout.splitlines()[-1]))
    assert "onceflow" in imported and len(dags) == 3
    assert not imported & CLIENT_LIBRARIES, sorted(imported & CLIENT_LIBRARIES)


def test_a_transforms_run_parameters_are_declared_params_recorded_in_the_plan_and_passed_to_it_alone():
    """The transform's parameters: Params of the DAG, a namespace of the plan apart from its facts,
    the third argument of the transform; a replay gets the aborted batch's values (I6)."""
    from dataclasses import replace

    from onceflow.core.plan import Plan
    from onceflow.core.planning.config import PlanConfig
    from onceflow.core.planning.offsets import next_plan
    from onceflow.core.states import BatchState
    from tests.doubles.helpers import source

    spec = replace(ORDERS, run_params={"top_n": {"default": 10, "type": "integer", "minimum": 1}})
    dag = pipeline_dag(spec, warehouse="file:///w", dag_id="with_params")
    assert dag.params.get_param("top_n").value == 10 and "max_records_per_partition" in dag.params
    with pytest.raises(ConfigurationError, match="run_params name 'faults' is not valid: use a Python identifier other than"):
        replace(ORDERS, run_params={"faults": {"default": None}})

    config = PlanConfig(topics=("in",), sinks=(), transform_params={"top_n": 3})
    first = next_plan(pipeline="p", previous=None, previous_state=None, source=source(), config=config, now_ms=1)
    assert first.transform_params == {"top_n": 3} and "top_n" not in first.facts()
    replay = next_plan(pipeline="p", previous=first, previous_state=BatchState.ABORTED, source=source(),
                       config=replace(config, transform_params={"top_n": 7}), now_ms=2)
    assert replay.replay_of == first.batch_seq and replay.transform_params == {"top_n": 3}
    assert Plan.from_dict(replay.to_dict()).transform_params == {"top_n": 3}

    seen = []
    spec_with = replace(spec, transform="tests.unit.airflow.test_dag_factory:_transform_with_params")
    globals()["_transform_with_params"] = lambda records, batch_id, params: seen.append((batch_id, params)) or {}
    spec_with.apply_transform("records", replay)
    assert seen == [(replay.batch_id, {"top_n": 3})]


# Each step of pipeline_dag alone (its settings and schedule: test_dag_settings.py, test_dag_schedule.py).

def _settings(spec=ORDERS, **given):
    from onceflow.airflow.dag_settings import dag_settings

    return dag_settings(spec, warehouse=given.pop("warehouse", "s3://lake/w"), **given)


def test_an_offsets_pipelines_run_params_bound_the_records_read_and_take_the_transforms_and_faults():
    from dataclasses import replace

    from onceflow.airflow.dag_factory import run_params

    spec = replace(ORDERS, max_records_per_partition=500, run_params={"top_n": {"default": 10, "type": "integer"}})
    params = run_params(_settings(spec))
    assert list(params) == ["max_records_per_partition", "top_n", "faults"]
    assert (params["max_records_per_partition"].value, params["max_records_per_partition"].schema["minimum"]) == (500, 1)
    assert (params["top_n"].value, params["top_n"].schema["type"]) == (10, "integer")
    assert params["faults"].value is None and "ONCEFLOW_FAULT_INJECTION=enabled" in params["faults"].description


def test_an_interval_pipelines_run_params_may_replace_a_committed_interval_and_bound_nothing():
    from onceflow.airflow.dag_factory import run_params

    params = run_params(_settings(ORDERS_HOURLY))
    assert list(params) == ["replace_committed", "faults"]
    assert params["replace_committed"].value is False and params["replace_committed"].schema["type"] == "boolean"


def test_dag_arguments_default_to_one_run_at_a_time_without_catchup_and_pass_the_others_on():
    from onceflow.airflow.dag_factory import dag_arguments

    assert dag_arguments(_settings(), {"description": "d"}) == {"max_active_runs": 1, "catchup": False, "description": "d"}
    assert dag_arguments(_settings(ORDERS_HOURLY), {"max_active_runs": 3, "catchup": True}) == {"max_active_runs": 3, "catchup": True}


@pytest.mark.parametrize("setting, value", [("max_active_runs", 2), ("max_active_runs", None), ("catchup", True), ("catchup", "true")])
def test_dag_arguments_an_offsets_pipeline_cannot_honour_are_refused_word_for_word(setting, value):
    from onceflow.airflow.dag_factory import dag_arguments

    with pytest.raises(ConfigurationError) as refused:
        dag_arguments(_settings(), {setting: value})
    assert str(refused.value) == (
        f"pipeline 'orders': {setting}={value!r} needs batches='interval': the batches of an offsets pipeline "
        "follow each other, one run at a time, whatever the runs' dates"
    )


def test_the_tasks_are_built_from_the_settings_alone():
    from datetime import timedelta

    from airflow.sdk import DAG

    from onceflow.airflow.dag_factory import add_tasks, spark_env
    from onceflow.airflow.operators.spark import submit_defaults

    settings = _settings(dag_id="orders_tasks", kafka_conn_id="k", aws_conn_id="a", spark_conn_id="s",
                         spark_kafka_conn_id="sk", spark_binary="/bin/spark-submit", spark_timeout=timedelta(minutes=3),
                         spark_conf={"spark.executor.cores": "2"})
    with DAG("orders_tasks", schedule=None) as dag:
        add_tasks(settings)
    plan, spark, commit, rollback = (dag.get_task(t) for t in ("plan", "spark", "commit", "rollback"))
    assert plan.downstream_task_ids == {"spark"} and spark.downstream_task_ids == {"commit", "rollback"}
    assert commit.doc_json == settings.deployed.to_doc() and spark.deployed == settings.deployed
    for task in (plan, commit, rollback):
        assert (task.pipeline, task.warehouse, task.kafka_conn_id, task.aws_conn_id) == (ORDERS, "s3://lake/w", "k", "a")
    assert (spark._conn_id, spark.execution_timeout, spark.env_vars) == ("s", timedelta(minutes=3), spark_env(settings))
    assert spark._spark_binary == "/bin/spark-submit"
    assert spark.conf == {**submit_defaults(), "spark.executor.cores": "2"}


def test_the_spark_environment_reaches_kafka_through_the_spark_tasks_own_connection_and_names_the_catalogs():
    from onceflow.airflow.dag_factory import spark_env

    env = spark_env(_settings(kafka_conn_id="k", spark_kafka_conn_id="sk", aws_conn_id="a"))
    assert env["ONCEFLOW_KAFKA_CONFIG"] == "{{ conn.sk.extra }}" and env["ONCEFLOW_WAREHOUSE"] == "s3://lake/w"
    assert env["AWS_ACCESS_KEY_ID"] == "{{ conn.a.login }}"
    assert env["ONCEFLOW_ICEBERG_CATALOGS"] == '{"lake": {{ conn.lake.extra }}}'


def test_the_dag_describes_its_input_topics_and_each_output_with_its_kind_and_target():
    from onceflow.airflow.dag_factory import dag_doc

    assert dag_doc(_settings()) == (
        "Exactly-once pipeline `orders`: orders → daily_revenue (files: orders/daily_revenue), revenue_table "
        "(iceberg: sales.daily_revenue), orders_clean (kafka: orders_clean), orders_dead_letter (kafka: orders_dead_letter)")
