"""The settings a pipeline's DAG is built from: arguments, else the environment, else defaults."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from onceflow.airflow.dag_settings import DEFAULT_SPARK_TIMEOUT, dag_settings, default_spark_binary, spark_timeout_of
from onceflow.config.input_schedule import when_input
from onceflow.config.settings import ConfigurationError
from tests.doubles.specs import ORDERS

SETTING_VARS = ("ONCEFLOW_WAREHOUSE", "ONCEFLOW_KAFKA_CONN", "ONCEFLOW_SPARK_KAFKA_CONN", "ONCEFLOW_S3_CONN",
                "ONCEFLOW_SPARK_CONN", "ONCEFLOW_SCHEDULE")


@pytest.fixture
def no_settings_in_the_environment(monkeypatch):
    for name in SETTING_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_omitted_settings_are_read_from_the_environment(no_settings_in_the_environment):
    env = {"ONCEFLOW_WAREHOUSE": "s3://lake/w", "ONCEFLOW_KAFKA_CONN": "kafka_prod", "ONCEFLOW_SPARK_KAFKA_CONN":
           "kafka_writer", "ONCEFLOW_S3_CONN": "s3_prod", "ONCEFLOW_SPARK_CONN": "spark_prod",
           "ONCEFLOW_SCHEDULE": "@daily"}
    for name, value in env.items():
        no_settings_in_the_environment.setenv(name, value)
    settings = dag_settings(ORDERS)
    deployed = settings.deployed
    assert (deployed.warehouse, deployed.kafka_conn_id, deployed.aws_conn_id) == ("s3://lake/w", "kafka_prod", "s3_prod")
    assert (settings.spark_kafka_conn_id, settings.spark_conn_id, settings.schedule) == ("kafka_writer", "spark_prod", "@daily")


def test_arguments_win_over_the_environment(no_settings_in_the_environment):
    for name in SETTING_VARS:
        no_settings_in_the_environment.setenv(name, "from_the_environment")
    settings = dag_settings(ORDERS, dag_id="orders_staging", warehouse="file:///w", schedule="@hourly",
                            kafka_conn_id="k", spark_kafka_conn_id="sk", aws_conn_id="a", spark_conn_id="s",
                            spark_conf={"spark.executor.cores": "2"}, spark_binary="/opt/spark/bin/spark-submit",
                            spark_timeout=timedelta(minutes=7))
    deployed = settings.deployed
    assert (settings.dag_id, deployed.warehouse, deployed.kafka_conn_id, deployed.aws_conn_id) == ("orders_staging", "file:///w", "k", "a")
    assert (settings.schedule, settings.spark_kafka_conn_id, settings.spark_conn_id) == ("@hourly", "sk", "s")
    assert settings.spark_conf == {"spark.executor.cores": "2"}
    assert (settings.spark_binary, settings.spark_timeout) == ("/opt/spark/bin/spark-submit", timedelta(minutes=7))


def test_without_arguments_or_environment_each_setting_takes_its_default(no_settings_in_the_environment):
    settings = dag_settings(ORDERS, warehouse="file:///w")
    deployed = settings.deployed
    assert (settings.dag_id, settings.spec) == ("orders", ORDERS)
    assert (deployed.kafka_conn_id, deployed.aws_conn_id, settings.spark_conn_id) == ("onceflow_kafka", "onceflow_s3", "onceflow_spark")
    assert settings.spark_kafka_conn_id == "onceflow_kafka"  # the spark task signs in as the pipeline does
    assert settings.schedule == ORDERS.schedule and settings.spark_conf == {}
    assert (settings.spark_binary, settings.spark_timeout) == (default_spark_binary(), spark_timeout_of(ORDERS))


def test_the_spark_task_signs_in_with_the_pipelines_kafka_connection_unless_given_its_own(no_settings_in_the_environment):
    assert dag_settings(ORDERS, warehouse="file:///w", kafka_conn_id="kafka_prod").spark_kafka_conn_id == "kafka_prod"


def test_no_warehouse_names_the_setting_and_its_fix(no_settings_in_the_environment):
    with pytest.raises(ConfigurationError) as refused:
        dag_settings(ORDERS)
    assert str(refused.value) == (
        "pipeline 'orders': no warehouse. Pass warehouse='s3://bucket/prefix' (or file:///path) to pipeline_dag, "
        "or set ONCEFLOW_WAREHOUSE for the DAG processor and workers"
    )


@pytest.mark.parametrize("given, environment, expected", [
    ("spec", None, ORDERS.schedule),
    ("spec", "@daily", "@daily"),
    ("spec", "none", None),
    ("spec", "input: records=100", when_input(records=100)),
    ("@hourly", "@daily", "@hourly"),
    (None, "@daily", None),
], ids=["the spec's", "the environment's over the spec's", "none from the environment", "input from the environment",
        "an argument over the environment", "None as an argument"])
def test_the_schedule_is_the_argument_else_the_environments_else_the_specs(no_settings_in_the_environment, given,
                                                                          environment, expected):
    if environment is not None:
        no_settings_in_the_environment.setenv("ONCEFLOW_SCHEDULE", environment)
    assert dag_settings(ORDERS, warehouse="file:///w", schedule=given).schedule == expected


def test_the_spark_timeout_is_the_shortest_vote_lifetime_else_the_default():
    shortest = min(s.transaction_timeout_ms for s in ORDERS.sinks if s.kind == "kafka")
    assert spark_timeout_of(ORDERS) == timedelta(milliseconds=shortest / 2)
    files_only = replace(ORDERS, sinks=tuple(s for s in ORDERS.sinks if s.kind == "files"))
    assert spark_timeout_of(files_only) == DEFAULT_SPARK_TIMEOUT
