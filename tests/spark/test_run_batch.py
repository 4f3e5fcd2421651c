"""spark_jobs/run_batch.py: the job entry point pre-commits the file output of
the clickstream pipeline through the onceflow_files data source."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from onceflow.files import FileSink, committed_files, read_committed
from onceflow.pipelines.clickstream_data import as_kafka_records, generate
from onceflow.protocol.participant import Outcome
from onceflow.spark.vote_handoff import read_recorded_vote

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "spark_jobs" / "run_batch.py"


def load_run_batch():
    spec = importlib.util.spec_from_file_location("run_batch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def clicks(tmp_path_factory):
    records = generate(2000, seed=11, malformed_ratio=0.1)
    path = tmp_path_factory.mktemp("input") / "clicks.parquet"
    pq.write_table(as_kafka_records(records), path)
    return path, sum(r.reason is None for r in records)


def args_for(warehouse: Path, clicks_path: Path, *extra: str) -> list[str]:
    return ["--pipeline", "clickstream", "--batch", "12", "--attempt", "2", "--warehouse", str(warehouse),
            "--input", str(clicks_path), *extra]


def check_committed_counts(warehouse: Path, vote_path: str, valid: int) -> None:
    vote = read_recorded_vote(vote_path)
    assert (vote.participant, vote.batch_seq, vote.attempt) == ("page_minute_counts", 12, 2)
    sink_uri = str(warehouse / "clickstream" / "page_minute_counts")
    assert committed_files(sink_uri) == []
    assert FileSink("page_minute_counts", sink_uri).commit(vote).outcome is Outcome.DONE
    table = read_committed(sink_uri)
    assert sum(table["views"].to_pylist()) == valid  # every valid event counted once
    assert set(table["batch_id"].to_pylist()) == {"0000000012"}


def test_the_job_stages_the_file_output_and_records_its_vote(spark, clicks, tmp_path):
    run_batch = load_run_batch()
    clicks_path, valid = clicks
    warehouse = tmp_path / "wh"
    votes = run_batch.run(run_batch.parse_args(args_for(warehouse, clicks_path, "--skip-kafka-outputs")))
    assert set(votes) == {"page_minute_counts"}
    check_committed_counts(warehouse, votes["page_minute_counts"], valid)


def test_kafka_outputs_without_their_data_source_fail_fast(clicks, tmp_path, capsys):
    run_batch = load_run_batch()
    assert run_batch.main(args_for(tmp_path / "wh", clicks[0])) == 2
    err = capsys.readouterr().err
    assert "clicks_enriched" in err and "--skip-kafka-outputs" in err
    assert not (tmp_path / "wh").exists()


@pytest.mark.slow  # a spark-submit process of its own: about 40 s
def test_spark_submit_ships_the_library_and_runs_the_job(clicks, tmp_path):
    import shutil

    clicks_path, valid = clicks
    archive = shutil.make_archive(str(tmp_path / "onceflow"), "zip", root_dir=ROOT / "plugins", base_dir="onceflow")
    warehouse = tmp_path / "wh"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", "--py-files", archive,
         "--conf", "spark.ui.enabled=false", str(SCRIPT), *args_for(warehouse, clicks_path, "--skip-kafka-outputs")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    check_committed_counts(warehouse, summary["votes"]["page_minute_counts"], valid)
