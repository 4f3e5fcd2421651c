"""spark_jobs/run_batch.py: the spark-submit entry point of a batch."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from onceflow.pipelines.clickstream import CLICKSTREAM
from onceflow.settings import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "spark_jobs" / "run_batch.py"


@pytest.fixture(scope="module")
def run_batch():
    spec = importlib.util.spec_from_file_location("run_batch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_spec_is_found_by_module_or_registry(run_batch):
    assert run_batch.load_spec("clickstream", None) is CLICKSTREAM
    assert run_batch.load_spec("clickstream", "onceflow.pipelines.clickstream") is CLICKSTREAM
    assert run_batch.load_spec("clickstream", "onceflow.pipelines.clickstream:CLICKSTREAM") is CLICKSTREAM


@pytest.mark.parametrize(
    "name, location, message",
    [
        # onceflow.spec defines the class, not a pipeline: a DAG must pass the defining module.
        ("clickstream", "onceflow.spec", "no PipelineSpec named 'clickstream'"),
        ("other", None, "no pipeline named 'other'"),
    ],
)
def test_a_wrong_spec_fails_fast_naming_the_fix(run_batch, name, location, message):
    with pytest.raises(ConfigurationError, match=message):
        run_batch.load_spec(name, location)


def test_no_warehouse_exits_2_before_spark_starts(run_batch, monkeypatch, capsys):
    monkeypatch.delenv("ONCEFLOW_WAREHOUSE", raising=False)
    assert run_batch.main(["--pipeline", "clickstream", "--batch", "1"]) == 2
    assert "ONCEFLOW_WAREHOUSE" in capsys.readouterr().err


@pytest.mark.slow  # planning on a real broker, then a spark-submit process: about a minute
def test_spark_submit_pre_commits_a_planned_batch_that_then_commits_exactly_once(kafka_broker, tmp_path):
    from onceflow.audit.clickstream_audit import audit_clickstream
    from onceflow.kafka.admin import ensure_topics
    from onceflow.runtime import Deployment, PipelineRuntime
    from onceflow.services.kafka_broker import HIDES_ABORTED_RECORDS
    from tests.spark.test_batch_job import produce, unique_clickstream
    from tests.support import require

    require(kafka_broker, HIDES_ABORTED_RECORDS)
    spec = unique_clickstream(uuid.uuid4().hex[:8])
    ensure_topics(kafka_broker.config(), [spec.topics[0], *(s.target for s in spec.sinks if s.kind == "kafka")])
    warehouse = f"file://{tmp_path}/warehouse"
    runtime = PipelineRuntime(spec, Deployment(warehouse, kafka_broker))
    produced = produce(kafka_broker, spec.topics[0], 600, seed=3)
    with runtime.offset_source() as source:
        plan = runtime.coordinator.plan_next(source, runtime.plan_config(), run_id="run-1")

    # The spec lives in a module of its own, as a user's pipeline would.
    (tmp_path / "my_pipelines.py").write_text(
        f"from onceflow.spec import PipelineSpec\nSPEC = PipelineSpec.from_json({spec.to_json()!r})\n")
    archive = shutil.make_archive(str(tmp_path / "onceflow"), "zip", root_dir=ROOT / "plugins", base_dir="onceflow")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", ONCEFLOW_WAREHOUSE=warehouse,
               ONCEFLOW_KAFKA_BOOTSTRAP=kafka_broker.bootstrap, ONCEFLOW_KAFKA_CONFIG=json.dumps(kafka_broker.client_config),
               PYTHONPATH=str(tmp_path))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", "--py-files", archive,
         "--conf", "spark.ui.enabled=false", str(SCRIPT),
         "--pipeline", spec.name, "--batch", str(plan.batch_seq), "--spec", "my_pipelines:SPEC"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = [line for line in proc.stdout.splitlines() if line.startswith('{"')]
    assert summary, proc.stdout[-2000:]
    result = json.loads(summary[-1])
    assert (result["batch"], result["input_records"]) == (plan.batch_seq, plan.records)
    # Where the job's time went, for the operator reading the task log: the read, then each output.
    assert list(result["seconds"]) == ["read", *(s.name for s in spec.sinks)], result
    assert all(v > 0 for v in result["seconds"].values()), result
    assert plan.records == produced  # 300 per partition: one batch takes them all

    assert runtime.coordinator.commit(plan.batch_seq).state.value == "committed"
    report = audit_clickstream(runtime)
    assert report.ok, report.summary()
    assert report.input_records == produced and report.valid + report.malformed == produced
