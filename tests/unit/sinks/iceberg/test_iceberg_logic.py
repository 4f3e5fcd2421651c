"""The Iceberg sink's pure logic: partition specs, data file metadata in votes,
which catalog properties are secret, and where a catalog is configured."""

from __future__ import annotations

import json
import re

import pytest

from onceflow.airflow.dag_factory import pipeline_dag
from onceflow.config.deployment import Deployment
from onceflow.sinks.iceberg import data_files
from onceflow.config.iceberg_catalogs import is_secret_property, public_properties
from onceflow.sinks.iceberg.tables import PartitionField, attempt_dir, batch_dir, partition_fields
from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.config.settings import ConfigurationError, iceberg_catalogs
from onceflow.sinks import sink_kind
from onceflow.pipeline.spec import ICEBERG, PipelineSpec, SinkSpec

CATALOG = {"type": "sql", "uri": "postgresql+psycopg2://svc:db-pass@db/catalog", "warehouse": "s3://lake/t",
           "s3.region": "eu-west-1", "s3.endpoint": "https://s3.example", "s3.access-key-id": "AKIA",
           "s3.secret-access-key": "lake-secret", "token": "rest-token", "credential": "id:secret"}


def test_partition_by_takes_columns_and_iceberg_transforms_and_names_a_bad_entry():
    assert partition_fields(("day(window_start)", "bucket[16](page)", "page"), "sink 's'") == [
        PartitionField("window_start", "day"), PartitionField("page", "bucket[16]"), PartitionField("page", "identity")]
    assert [f.name for f in partition_fields(("day(window_start)", "page"), "s")] == ["window_start_day", "page"]
    with pytest.raises(ConfigurationError, match=re.escape("sink 's': partition_by entry 'day(a' is not valid")):
        partition_fields(("day(a",), "sink 's'")
    with pytest.raises(ConfigurationError, match="'fortnight' is not an Iceberg transform"):
        partition_fields(("fortnight(a)",), "sink 's'")


def test_a_batch_attempt_writes_under_its_own_directory_of_the_table_named_after_its_plan():
    assert batch_dir("s3://lake/t/", "p", "out", 7, 1790000000123) == "s3://lake/t/data/onceflow/p/out/0000000007-1790000000123"
    assert attempt_dir("s3://lake/t", "p", "out", 7, 5, 2) == "s3://lake/t/data/onceflow/p/out/0000000007-5/a2"


def test_a_data_file_travels_in_a_vote_as_json_and_comes_back_the_same():
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    original = DataFile.from_args(
        _table_format_version=2, content=DataFileContent.DATA, file_path="s3://lake/t/data/f.parquet",
        file_format=FileFormat.PARQUET, partition=Record(20416, "home"), record_count=12, file_size_in_bytes=3456,
        column_sizes={1: 10, 2: 20}, value_counts={1: 12, 2: 12}, null_value_counts={1: 0, 2: 1},
        nan_value_counts={}, lower_bounds={1: b"\x00\x01"}, upper_bounds={1: b"\xff"}, split_offsets=[4],
        sort_order_id=None, equality_ids=None, key_metadata=None)
    raw = json.loads(json.dumps(data_files.encode(original, spec_id=3)))
    assert (raw["path"], raw["rows"], raw["size"], raw["partition"]) == ("s3://lake/t/data/f.parquet", 12, 3456, [20416, "home"])
    back = data_files.decode(raw, format_version=2)
    assert back.spec_id == 3
    for name in ("file_path", "record_count", "file_size_in_bytes", "column_sizes", "value_counts", "null_value_counts",
                 "lower_bounds", "upper_bounds", "split_offsets"):
        assert getattr(back, name) == getattr(original, name), name
    assert back.partition == original.partition


def test_only_where_storage_is_counts_as_public_everything_else_is_a_secret():
    secret = {k for k in CATALOG if is_secret_property(k)}
    assert secret == {"uri", "s3.access-key-id", "s3.secret-access-key", "token", "credential"}
    assert public_properties(CATALOG) == {"type": "sql", "warehouse": "s3://lake/t", "s3.region": "eu-west-1",
                                          "s3.endpoint": "https://s3.example"}
    # Keys nobody listed (Azure's, a REST header) are withheld too.
    assert all(is_secret_property(k) for k in ("adls.account-key", "adls.connection-string", "header.Authorization"))


def test_spark_workers_get_a_catalog_without_secrets_and_add_their_own(monkeypatch):
    monkeypatch.delenv("ONCEFLOW_KAFKA_CONFIG", raising=False)
    deployment = Deployment("file:///w", KafkaCluster("b:9092"), None, {"lake": CATALOG})
    option = deployment.to_option()
    assert not any(v in option for v in ("db-pass", "lake-secret", "rest-token", "id:secret", "AKIA"))
    assert "lake-secret" not in repr(deployment)
    monkeypatch.delenv("ONCEFLOW_ICEBERG_CATALOGS", raising=False)
    assert Deployment.from_option(option).catalogs["lake"] == public_properties(CATALOG)
    monkeypatch.setenv("ONCEFLOW_ICEBERG_CATALOGS", json.dumps({"lake": {"s3.secret-access-key": "from-env", "warehouse": "x"}}))
    worker = Deployment.from_option(option).catalogs["lake"]
    assert worker["s3.secret-access-key"] == "from-env" and worker["warehouse"] == "s3://lake/t"  # only secrets come from env


def test_a_missing_catalog_names_the_connection_and_the_variable(monkeypatch):
    deployment = Deployment("file:///w", KafkaCluster("b:9092"))
    sink = SinkSpec("t", ICEBERG, "ns.t", catalog="lake")
    with pytest.raises(ConfigurationError, match="Iceberg catalog 'lake' is not configured: create the Airflow connection 'lake'.*ONCEFLOW_ICEBERG_CATALOGS"):
        sink_kind(ICEBERG).check(sink, deployment)
    with pytest.raises(ConfigurationError, match="no catalog: set SinkSpec\\(catalog=...\\)"):
        sink_kind(ICEBERG).check(SinkSpec("t", ICEBERG, "ns.t"), deployment)
    monkeypatch.setenv("ONCEFLOW_ICEBERG_CATALOGS", '{"lake": "sqlite"}')
    with pytest.raises(ConfigurationError, match="ONCEFLOW_ICEBERG_CATALOGS: the value of \\['lake'\\] is not an object"):
        iceberg_catalogs()


def test_the_spark_task_gets_each_catalog_as_a_template_of_its_connection():
    spec = PipelineSpec("tables", ("t",), "tests.doubles.specs:transform", (SinkSpec("a", ICEBERG, "ns.a", catalog="lake"),
                                                     SinkSpec("b", ICEBERG, "ns.b", catalog="lake")))
    env = pipeline_dag(spec, warehouse="file:///w", dag_id="tables_unit").get_task("spark").env_vars
    assert env["ONCEFLOW_ICEBERG_CATALOGS"] == '{"lake": {{ conn.lake.extra }}}'
    assert sink_kind(ICEBERG).asset_uri(spec.sinks[0], "file:///w") == "iceberg://lake/ns.a"


def test_a_catalog_or_storage_failure_is_retried_only_when_retrying_can_help():
    from pyiceberg import exceptions as ice

    from onceflow.sinks.iceberg.participant import outcome_of
    from onceflow.core.participant import Outcome

    class OperationalError(Exception):  # SQLAlchemy's, by name
        pass

    retry = [ice.CommitFailedException("lost a race"), ice.ServiceUnavailableError("503"),
             ice.CommitStateUnknownException("gateway timeout"), OperationalError("database is locked"),
             OSError("AWS Error NETWORK_CONNECTION during GetObject"), ConnectionError("refused")]
    fail = [ice.NoSuchTableError("gone"), ice.ForbiddenError("403"), ice.UnauthorizedError("401"),
            OperationalError('password authentication failed for user "svc"'), PermissionError("denied"),
            OSError("AWS Error ACCESS_DENIED during PutObject"), FileNotFoundError("x"), ValueError("bad")]
    assert [outcome_of(e) for e in retry] == [Outcome.RETRY_LATER] * len(retry)
    assert [outcome_of(e) for e in fail] == [Outcome.FAILED] * len(fail)


def test_the_catalog_is_the_connections_own_never_merged_with_pyiceberg_config(tmp_path):
    """pyiceberg's load_catalog would add PYICEBERG_CATALOG__<NAME>__* (read at import, so
    in a process of its own here): a worker with such a variable would reach another endpoint."""
    import os
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from pyiceberg.catalog import load_catalog\n"
        "from onceflow.sinks.iceberg.tables import open_catalog\n"
        "p = json.loads(sys.argv[1])\n"
        "print(json.dumps([load_catalog('lake', **p).properties, open_catalog('lake', p).properties]))\n"
    )
    given = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}"}
    env = {**os.environ, "PYICEBERG_CATALOG__LAKE__S3__ENDPOINT": "http://elsewhere:9000"}
    out = subprocess.run([sys.executable, "-c", script, json.dumps(given)], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    pyiceberg_own, ours = json.loads(out.stdout)
    assert pyiceberg_own["s3.endpoint"] == "http://elsewhere:9000"  # what we avoid
    assert ours == given


def test_a_catalog_that_hides_snapshots_is_refused_before_planning():
    deployment = Deployment("file:///w", KafkaCluster("b:9092"), None,
                            {"lake": {"type": "rest", "uri": "https://c", "snapshot-loading-mode": "refs"}})
    with pytest.raises(ConfigurationError, match="snapshot-loading-mode=refs, which hides the snapshots"):
        sink_kind(ICEBERG).check(SinkSpec("t", ICEBERG, "ns.t", catalog="lake"), deployment)


def test_a_participant_without_its_catalog_is_built_and_fails_only_the_calls_that_need_it():
    from onceflow.core.participant import Outcome, Vote

    spec = PipelineSpec("tables", ("t",), "tests.doubles.specs:transform",
                        (SinkSpec("a", ICEBERG, "ns.a", catalog="lake"),))
    participant = sink_kind(ICEBERG).participant(spec, spec.sinks[0], Deployment("file:///w", KafkaCluster("b:9092")))
    verdict = participant.verify(Vote("a", 1, 1, {"table": "ns.a", "planned_at_ms": 1, "files": []}))
    assert verdict.outcome is Outcome.FAILED and "Iceberg catalog 'lake' is not configured" in verdict.detail


def test_without_pyiceberg_the_plan_task_names_the_extra_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyiceberg" else real(name, *a))
    deployment = Deployment("file:///w", KafkaCluster("b:9092"), None, {"lake": {"type": "sql", "uri": "sqlite:///x"}})
    with pytest.raises(ConfigurationError, match=r"pip install 'onceflow\[iceberg\]'"):
        sink_kind(ICEBERG).check(SinkSpec("t", ICEBERG, "ns.t", catalog="lake"), deployment)
