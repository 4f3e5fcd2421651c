"""The spark task's spark-submit command, as the Spark provider builds it, on
every master the README advertises: no secret value is ever an argument."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from onceflow.airflow.deployed import DeployedPipeline
from onceflow.airflow.operators.spark import OnceflowSparkSubmitOperator
from onceflow.pipeline.spec import PipelineSpec
from onceflow.spark.shipping import SPEC_VAR
from tests.doubles.specs import ORDERS

AWS_SECRET = "aws-secret-value-0123"
AWS_TOKEN = "aws-session-token-4567"
KAFKA_SECRET = "kafka-sasl-password-89"
CATALOG_SECRET = "catalog-db-password-31"
LAKE_SECRET = "lake-secret-key-77"
SPEC_TOKEN = "spec-params-token-55"  # the spec's free-form params may hold one
SPEC = replace(ORDERS, params={"token": SPEC_TOKEN})
ENV = {
    "ONCEFLOW_KAFKA_BOOTSTRAP": "b1:9093",
    "ONCEFLOW_KAFKA_CONFIG": json.dumps({"security.protocol": "SASL_SSL", "sasl.username": "svc", "sasl.password": KAFKA_SECRET}),
    "ONCEFLOW_WAREHOUSE": "s3://lake/w",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
    "AWS_SESSION_TOKEN": AWS_TOKEN,
    "AWS_DEFAULT_REGION": "eu-west-1",
    "ONCEFLOW_FAULTS": "",
    "ONCEFLOW_ICEBERG_CATALOGS": json.dumps({"lake": {
        "type": "sql", "uri": f"postgresql+psycopg2://svc:{CATALOG_SECRET}@db/catalog", "warehouse": "s3://lake/t",
        "s3.region": "eu-west-1", "s3.access-key-id": "AKIALAKE", "s3.secret-access-key": LAKE_SECRET}}),
}
SECRETS = (AWS_SECRET, AWS_TOKEN, KAFKA_SECRET, CATALOG_SECRET, LAKE_SECRET, SPEC_TOKEN)
MASTERS = {"local": "local[2]", "standalone": "spark://10.0.0.5:7077", "yarn": "yarn", "k8s": "k8s://https://10.0.0.9:6443"}


def _command(monkeypatch, master: str):
    from airflow.providers.apache.spark.hooks import spark_submit

    # The provider refuses k8s:// without the cncf.kubernetes provider's client, which only tracks the
    # driver pod after submission; the command is built without it.
    monkeypatch.setattr(spark_submit, "kube_client", object(), raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNDER_TEST", json.dumps({"conn_type": "spark", "host": master}))
    op = OnceflowSparkSubmitOperator(task_id="spark", application="/app/submit.py", conn_id="spark_under_test",
                                     env_vars=dict(ENV), spark_binary="spark-submit",
                                     deployed=DeployedPipeline("orders", SPEC, "s3://lake/w", "onceflow_kafka", None))
    op.env_vars = op.submitted_env()  # what execute() does before the provider builds the command
    hook = op._get_hook()
    return hook._build_spark_submit_command("/app/submit.py"), hook


@pytest.mark.parametrize("master", MASTERS)
def test_no_secret_is_ever_an_argument_of_spark_submit(monkeypatch, master):
    command, _hook = _command(monkeypatch, MASTERS[master])
    text = " ".join(command)
    assert not any(secret in text for secret in SECRETS), command
    assert "ONCEFLOW_FAULTS" not in text  # an empty value leaves the worker's own setting alone


@pytest.mark.parametrize("master", ["local", "standalone"])
def test_where_the_environment_stays_an_environment_the_driver_gets_its_secrets(monkeypatch, master):
    command, hook = _command(monkeypatch, MASTERS[master])
    assert hook._env["AWS_SECRET_ACCESS_KEY"] == AWS_SECRET and hook._env["AWS_SESSION_TOKEN"] == AWS_TOKEN
    assert json.loads(hook._env["ONCEFLOW_KAFKA_CONFIG"])["sasl.password"] == KAFKA_SECRET
    assert json.loads(hook._env["ONCEFLOW_ICEBERG_CATALOGS"])["lake"]["s3.secret-access-key"] == LAKE_SECRET
    assert PipelineSpec.from_json(hook._env[SPEC_VAR]) == SPEC  # the whole spec, params and all


@pytest.mark.parametrize("master", ["yarn", "k8s"])
def test_on_yarn_and_kubernetes_secrets_are_withheld_and_the_rest_still_reaches_the_driver(monkeypatch, master, caplog):
    command, _hook = _command(monkeypatch, MASTERS[master])
    text = " ".join(command)
    assert "ONCEFLOW_WAREHOUSE=s3://lake/w" in text and "AWS_DEFAULT_REGION=eu-west-1" in text
    assert '"sasl.username": "svc"' in text and "AWS_ACCESS_KEY_ID" not in text  # no half key pair either
    assert "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN" in caplog.text and "ONCEFLOW_KAFKA_CONFIG[sasl.password]" in caplog.text
    assert '\\"s3.region\\": \\"eu-west-1\\"' in text or '"s3.region": "eu-west-1"' in text  # the catalog's public part
    assert "ONCEFLOW_ICEBERG_CATALOGS[lake][uri]" in caplog.text and "[lake][s3.secret-access-key]" in caplog.text
    assert not any(secret in caplog.text for secret in SECRETS)
    assert f"{SPEC_VAR}[params]" in caplog.text and f"{SPEC_VAR}=" in text  # the spec, without its params


@pytest.mark.parametrize("planned_here", [False, True], ids=["plan task", "planned in the spark task"])
def test_in_spark_connect_mode_the_job_runs_as_the_spark_task_s_kafka_connection_not_the_pipeline_s(monkeypatch, planned_here):
    # On a secured broker the spark task's connection is the writer's principal; the server's Python workers
    # take the user from the job's options and only the password from their environment, so a job built
    # from the pipeline's (the plan and commit tasks') connection would log in as the wrong user.
    from onceflow.airflow.operators import spark as spark_operator
    from onceflow.config.deployment import Deployment
    from onceflow.config.kafka_cluster import KafkaCluster
    from onceflow.pipeline.runtime import PipelineRuntime

    airflow_side = KafkaCluster("b1:9093", {"security.protocol": "SASL_SSL", "sasl.username": "onceflow-airflow"})
    monkeypatch.setattr(spark_operator, "task_runtime",
                        lambda context, deployed: PipelineRuntime(SPEC, Deployment("file:///w", airflow_side), "try1"))
    jobs = []

    class Job:
        def __init__(self, url, runtime, seq, code_zips):
            jobs.append(runtime)
            assert seq == 7

        def run(self):
            return type("Result", (), {"to_dict": lambda self, name: {"pipeline": name}})()

    monkeypatch.setattr(spark_operator, "ConnectBatchJob", Job)
    op = OnceflowSparkSubmitOperator(task_id="spark", application="/app/submit.py", conn_id="spark_connect_under_test",
                                     env_vars=dict(ENV), py_files="onceflow.zip",
                                     deployed=DeployedPipeline("orders", SPEC, "s3://lake/w", "onceflow_kafka", None))
    # planned here: the runtime that planned (the pipeline's connection) is handed on
    planner = PipelineRuntime(SPEC, Deployment("file:///w", airflow_side), "try1") if planned_here else None
    op.execute_connect({"params": {}}, "sc://localhost:15002", 7, planner)

    (runtime,) = jobs
    assert runtime.deployment.kafka.bootstrap == "b1:9093"
    assert runtime.deployment.kafka.client_config["sasl.username"] == "svc"  # ENV's: the spark task's connection
    assert runtime.deployment.kafka.client_config["sasl.password"] == KAFKA_SECRET
    assert runtime.identity == "try1" and runtime.spec == SPEC


def test_a_spark_task_without_its_deployed_pipeline_fails_when_the_dag_is_parsed_not_when_it_runs():
    """The spark task's spec, connections and batch come from the pipeline as deployed (pipeline_dag builds it):
    a hand-made spark task without it is an import error in the UI, not a run that fails after planning."""
    with pytest.raises(TypeError, match="deployed"):
        OnceflowSparkSubmitOperator(task_id="spark", application="/app/submit.py")
