"""The clickstream DAG run by Airflow itself (``airflow dags test``), audited."""

from __future__ import annotations

DAG_ID = "clickstream_exactly_once"


def test_a_run_commits_its_batch_exactly_once(world):
    produced = world.produce(1200, seed=1)
    result = world.airflow.dags_test(DAG_ID, conf={"max_records_per_partition": 10_000}, timeout=600)
    assert result.succeeded, result.describe()
    assert result.tasks == {"plan": "success", "spark": "success", "commit": "success", "rollback": "skipped"}
    report = world.audit()
    assert report.ok, report.summary()
    assert report.input_records == produced and report.committed_batches == 1
