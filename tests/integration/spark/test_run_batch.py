"""onceflow/spark/submit.py: the spark-submit application of a batch (what the DAG submits)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from onceflow.spark.shipping import SUBMIT_APPLICATION as SCRIPT, shipped_code
from onceflow.spark import submit as run_batch_module
from onceflow_examples.clickstream import CLICKSTREAM
from onceflow.config.settings import ConfigurationError

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


@pytest.fixture(scope="module")
def run_batch():
    return run_batch_module


def test_the_spec_is_found_by_module(run_batch):
    assert run_batch.load_spec("clickstream", "onceflow_examples.clickstream") is CLICKSTREAM
    assert run_batch.load_spec("clickstream", "onceflow_examples.clickstream:CLICKSTREAM") is CLICKSTREAM


@pytest.mark.parametrize(
    "name, location, message",
    [
        # onceflow.pipeline.spec defines the class, not a pipeline: a DAG must pass the defining module.
        ("clickstream", "onceflow.pipeline.spec", "no PipelineSpec named 'clickstream'"),
        ("other", None, r"no spec for pipeline 'other': the spark task of pipeline_dag passes it in \$ONCEFLOW_SPEC_JSON"),
        ("clickstream", "no_such_module:SPEC", "cannot import 'no_such_module'"),
    ],
)
def test_a_wrong_spec_fails_fast_naming_the_fix(run_batch, name, location, message):
    with pytest.raises(ConfigurationError, match=message):
        run_batch.load_spec(name, location)


def test_without_spec_the_job_takes_the_one_its_environment_holds_and_it_must_be_the_pipelines(run_batch, monkeypatch):
    from onceflow.spark.shipping import SPEC_VAR

    monkeypatch.setenv(SPEC_VAR, CLICKSTREAM.to_json())
    assert run_batch.load_spec("clickstream", None) == CLICKSTREAM
    with pytest.raises(ConfigurationError, match=r"\$ONCEFLOW_SPEC_JSON describes pipeline 'clickstream', not --pipeline 'other'"):
        run_batch.load_spec("other", None)


def test_no_warehouse_exits_2_before_spark_starts(run_batch, monkeypatch, capsys):
    monkeypatch.delenv("ONCEFLOW_WAREHOUSE", raising=False)
    assert run_batch.main(["--pipeline", "clickstream", "--batch", "1", "--spec", "onceflow_examples.clickstream:CLICKSTREAM"]) == 2
    assert "ONCEFLOW_WAREHOUSE" in capsys.readouterr().err


def planned_batch(broker, warehouse: str, s3=None):
    """A fresh clickstream pipeline on ``broker`` with 600 events, and the plan of its first batch."""
    from onceflow.kafka.admin import ensure_topics
    from onceflow.pipeline.runtime import Deployment, PipelineRuntime
    from tests.integration.spark.test_batch_job import produce, unique_clickstream

    spec = unique_clickstream(uuid.uuid4().hex[:8])
    ensure_topics(broker.config(), [spec.topics[0], *(s.target for s in spec.sinks if s.kind == "kafka")])
    runtime = PipelineRuntime(spec, Deployment(warehouse, broker, s3))
    produced = produce(broker, spec.topics[0], 600, seed=3)
    with runtime.offset_source() as source:
        plan = runtime.coordinator.plan_next(source, runtime.plan_config(), run_id="run-1")
    assert plan.records == produced  # 300 per partition: one batch takes them all
    return runtime, plan


def spark_submit(tmp_path: Path, runtime, plan, env: dict[str, str], master: str = "local[2]",
                 conf: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """spark-submit the application as the DAG does (onceflow and the transform's package shipped
    with --py-files, the zips the DAG ships), the spec in a module of its own as a user's would be."""
    spec = runtime.spec
    (tmp_path / "my_pipelines.py").write_text(
        f"from onceflow.pipeline.spec import PipelineSpec\nSPEC = PipelineSpec.from_json({spec.to_json()!r})\n")
    argv = [str(SPARK_SUBMIT), "--master", master, "--name", f"onceflow-{spec.name}",
            "--py-files", ",".join(shipped_code(spec)), "--conf", "spark.ui.enabled=false"]
    for key, value in (conf or {}).items():
        argv += ["--conf", f"{key}={value}"]
    argv += [str(SCRIPT), "--pipeline", spec.name, "--batch", str(plan.batch_seq), "--spec", "my_pipelines:SPEC"]
    env = dict(env, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(tmp_path),
               ONCEFLOW_WAREHOUSE=runtime.deployment.warehouse, ONCEFLOW_KAFKA_BOOTSTRAP=runtime.deployment.kafka.bootstrap,
               ONCEFLOW_KAFKA_CONFIG=json.dumps(runtime.deployment.kafka.client_config))
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)


def job_summary(proc: subprocess.CompletedProcess) -> dict:
    """The JSON line run_batch.py prints when every output voted. On failure: the driver's
    own output (spark-submit merges its stderr into stdout), then Spark's log."""
    assert proc.returncode == 0, proc.stdout[-3000:] + "\n--- spark-submit stderr ---\n" + proc.stderr[-2000:]
    summary = [line for line in proc.stdout.splitlines() if line.startswith('{"')]
    assert summary, proc.stdout[-2000:]
    return json.loads(summary[-1])


def assert_committed_exactly_once(runtime, plan) -> None:
    from onceflow_devkit.audit.clickstream_audit import audit_clickstream

    assert runtime.coordinator.commit(plan.batch_seq).state.value == "committed"
    report = audit_clickstream(runtime)
    assert report.ok, report.summary()
    assert report.input_records == plan.records and report.valid + report.malformed == plan.records


@pytest.mark.slow  # planning on a real broker, then a spark-submit process: about a minute
def test_spark_submit_pre_commits_a_planned_batch_that_then_commits_exactly_once(kafka_broker, tmp_path):
    from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS
    from tests.support import require

    require(kafka_broker, HIDES_ABORTED_RECORDS)
    runtime, plan = planned_batch(kafka_broker, f"file://{tmp_path}/warehouse")
    result = job_summary(spark_submit(tmp_path, runtime, plan, dict(os.environ, PYSPARK_PYTHON=sys.executable)))
    assert (result["batch"], result["input_records"]) == (plan.batch_seq, plan.records)
    # Where the job's time went, for the operator reading the task log: the read, then each output.
    assert list(result["seconds"]) == ["read", *(s.name for s in runtime.spec.sinks)], result
    assert all(v > 0 for v in result["seconds"].values()), result
    assert_committed_exactly_once(runtime, plan)


def python_without_onceflow(directory: Path) -> Path:
    """This venv's interpreter without its installed onceflow: its packages are on the path, but
    not the editable install's .pth (``-S`` skips site), so onceflow imports only from --py-files."""
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    wrapper = directory / "python-without-onceflow"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="$PYTHONPATH:{site_packages}" exec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.slow  # 50 s, the suite's only run in cluster mode: make test's spark-submit runs are local
def test_on_a_standalone_cluster_executors_get_onceflow_from_py_files_and_secrets_from_executor_env(
    one_kafka_broker, s3_endpoint, s3_bucket, spark_standalone, tmp_path
):
    """Cluster mode: executors started by the cluster's worker, with its environment plus the job's
    spark.executorEnv, and a Python that finds onceflow nowhere but in the --py-files zip (the
    driver's too). The warehouse is on S3, written from the executors. Without the S3 keys in
    spark.executorEnv the job fails naming that setting; run again with them, the batch commits
    exactly once."""
    from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS
    from tests.support import require

    require(one_kafka_broker, HIDES_ABORTED_RECORDS)
    python = python_without_onceflow(tmp_path)
    hidden = subprocess.run([str(python), "-c", "import pyarrow, pyspark, confluent_kafka, onceflow"], capture_output=True, text=True)
    assert "No module named 'onceflow'" in hidden.stderr, hidden.stderr

    runtime, plan = planned_batch(one_kafka_broker, f"s3://{s3_bucket}/warehouse", s3_endpoint)
    # The driver gets the S3 keys from its environment, as the DAG's spark task gives them.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ONCEFLOW_", "PYSPARK_", "SPARK_"))}
    env.update(PYSPARK_PYTHON=str(python), ONCEFLOW_S3_ENDPOINT=s3_endpoint.endpoint_url, **s3_endpoint.env())
    submit = functools.partial(spark_submit, tmp_path, runtime, plan, env, master=spark_standalone.master_url)

    failed = submit(conf={"spark.task.maxFailures": "1"})  # the error, not Spark's retries of it
    assert failed.returncode not in (0, 2, 3), failed.stderr[-3000:]
    assert "this Spark worker (warehouse s3://" in failed.stderr and "found no AWS credentials" in failed.stderr, failed.stderr[-3000:]
    assert "(spark.executorEnv.*) or a role of their own" in failed.stderr

    result = job_summary(submit(conf={"spark.executorEnv.AWS_ACCESS_KEY_ID": s3_endpoint.access_key,
                                      "spark.executorEnv.AWS_SECRET_ACCESS_KEY": s3_endpoint.secret_key}))
    assert (result["batch"], result["attempt"], result["input_records"]) == (plan.batch_seq, 2, plan.records)
    assert f"onceflow-{runtime.spec.name}" in spark_standalone.completed_app_names()
    assert_committed_exactly_once(runtime, plan)


def hermetic_aws_env(tmp_path: Path, s3_endpoint) -> dict[str, str]:
    """The environment of a driver with no AWS settings at all: no AWS_* keys, no
    profile files, no cloud metadata address; only the endpoint and region."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PYSPARK_PYTHON=sys.executable, ONCEFLOW_S3_ENDPOINT=s3_endpoint.endpoint_url,
               AWS_DEFAULT_REGION=s3_endpoint.region, AWS_EC2_METADATA_DISABLED="true",
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"), AWS_CONFIG_FILE=str(tmp_path / "no-config"))
    return env


class ContainerRole:
    """A container-credentials endpoint on 127.0.0.1 (what ECS or EKS Pod Identity
    serve): temporary keys with a session token, the way a role reaches boto3's chain."""

    def __init__(self, access_key: str, secret_key: str):
        import http.server
        import threading
        from datetime import datetime, timedelta, timezone

        body = json.dumps({"AccessKeyId": access_key, "SecretAccessKey": secret_key, "Token": "session-token-of-the-role",
                           "Expiration": (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")})
        self.requests = 0
        role = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                role.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v2/credentials/onceflow-job"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


# Two spark-submits, 30 s: slow, so make test stays under 20 minutes; tests/unit/config/test_settings.py
# checks the same settings fail fast, naming the fix, without a process.
@pytest.mark.slow
def test_a_driver_without_aws_settings_fails_naming_them_and_with_a_role_it_commits(
    one_kafka_broker, s3_endpoint, s3_bucket, tmp_path
):
    """No fallback credential: a driver on an S3 warehouse with nothing in its AWS chain exits 2
    before Spark starts, naming what to set. Given a role instead of keys (temporary keys and a
    session token from a credentials endpoint), the same job pre-commits, and the batch commits
    exactly once."""
    from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS
    from tests.support import require

    require(one_kafka_broker, HIDES_ABORTED_RECORDS)
    runtime, plan = planned_batch(one_kafka_broker, f"s3://{s3_bucket}/warehouse", s3_endpoint)
    env = hermetic_aws_env(tmp_path, s3_endpoint)

    failed = spark_submit(tmp_path, runtime, plan, env)
    assert failed.returncode == 2, failed.stderr[-3000:]
    # spark-submit runs the Python driver with its stderr merged into stdout.
    assert "found no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in failed.stdout, failed.stdout[-3000:]
    assert runtime.coordinator.describe(plan.batch_seq).attempt == 0  # it stopped before claiming an attempt

    role = ContainerRole(s3_endpoint.access_key, s3_endpoint.secret_key)
    try:
        result = job_summary(spark_submit(tmp_path, runtime, plan, dict(env, AWS_CONTAINER_CREDENTIALS_FULL_URI=role.url)))
    finally:
        role.close()
    assert role.requests >= 1
    assert (result["batch"], result["attempt"], result["input_records"]) == (plan.batch_seq, 1, plan.records)
    assert_committed_exactly_once(runtime, plan)
