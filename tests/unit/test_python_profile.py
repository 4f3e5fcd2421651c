"""benchmarks/python_profile.py: py-spy's raw stacks charged to categories, innermost frame first."""

from __future__ import annotations

import sys

import pytest

from tests.support import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import python_profile  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)

WORKER = 'process 1:"python spark_job.py";process 9:"python -m pyspark.daemon"'
DATA_SOURCE = "write (/x/pyspark/sql/worker/write_into_data_source.py:198)"


def test_a_sample_goes_to_the_innermost_frame_a_category_knows_and_counts_at_the_sampling_rate(tmp_path):
    raw = tmp_path / "onceflow-0.txt"
    raw.write_text("\n".join([
        # the staged copy's thread, hashing inside the digesting writer: the copy, not the data source around it
        f"{WORKER};{DATA_SOURCE};write (/x/src/onceflow/storage/digesting.py:24) 150",
        # the produce loop, under the writer: producing
        f"{WORKER};{DATA_SOURCE};write_batch (/x/src/onceflow/sinks/kafka/writer.py:189);"
        "_produce_unreported (/x/src/onceflow/sinks/kafka/producing.py:81) 300",
        # the writer's own line (to_pylist is C, so the writer's frame is innermost)
        f"{WORKER};{DATA_SOURCE};write_batch (/x/src/onceflow/sinks/kafka/writer.py:172) 50",
        f"{WORKER};manager (/x/pyspark/daemon.py:273) 100",
        f"{WORKER};somewhere (/x/elsewhere.py:1) 5",
    ]) + "\n")

    seconds = python_profile.categorized(raw)

    assert seconds["Kafka output: staged copy (Arrow IPC, SHA-256, file)"] == pytest.approx(1.5)
    assert seconds["Kafka output: producing (confluent-kafka)"] == pytest.approx(3.0)
    assert seconds["Kafka output: the writer's rest (Arrow to Python lists, headers, begin, flush)"] == pytest.approx(0.5)
    assert seconds["PySpark workers: fork, imports, gc after each task"] == pytest.approx(1.0)
    assert seconds[python_profile.OTHER] == pytest.approx(0.05)
