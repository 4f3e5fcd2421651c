"""The second example pipeline, ``shop_orders``, through Airflow (``airflow dags
test``; its spark tasks are clients of the Spark Connect server), from its own
DAGs folder, with a release of the user's package between two batches.

What clickstream does not exercise: two input topics; a keyed Kafka output
partitioned as Java producers partition (murmur2); an Iceberg table
partitioned by a date column; a transform whose package is installed nowhere
but the DAGs folder, so its Python UDF reaches Spark only by the code the DAG
factory ships; a new nullable column in an output between batches. Judged by
``onceflow audit`` (the replay) and by what plain readers see.
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from datetime import date, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka.partitioner.default import murmur2

from onceflow.ops.cli import main
from onceflow.sinks.files import read_committed
from onceflow.kafka.admin import ensure_topics
from onceflow.config.deployment import WAREHOUSE_VAR
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow.config.settings import ICEBERG_CATALOGS_VAR, KAFKA_BOOTSTRAP_VAR
from onceflow.sinks import sink_kind
from onceflow_devkit.airflow_env import onceflow_airflow
from onceflow_devkit.services.iceberg_catalog import embedded_catalogs, table_of
from onceflow_devkit.services.postgres import CONN_ID as POSTGRES_CONN_ID
from tests.support import ROOT
from tests.system.e2e.conftest import emptied
from tests.system.e2e.shop_data import generate, produce

DAG_ID = "shop_orders_exactly_once"
SHOP_DAGS = ROOT / "examples" / "shop_dags"
RELEASE_2_LINE = '"order_date", "ts", "coupon")'
COMMITTED_RUN = {"plan": "success", "spark": "success", "commit": "success", "rollback": "skipped"}


def deploy(dags: Path, release: int) -> None:
    """The shop's DAGs folder as its deployment ships it; release 1 had no coupon column."""
    shutil.rmtree(dags, ignore_errors=True)
    shutil.copytree(SHOP_DAGS, dags, ignore=shutil.ignore_patterns("__pycache__"))
    if release == 1:
        orders = dags / "shop_pipelines" / "orders.py"
        source = orders.read_text()
        assert source.count(RELEASE_2_LINE) == 1
        orders.write_text(source.replace(RELEASE_2_LINE, '"order_date", "ts")'))


def keyed_partitions(config, topic: str) -> list[tuple[int, bytes]]:
    """(partition, key) of every record a read_committed consumer sees in ``topic``."""
    consumer = Consumer({**config, "group.id": f"e2e-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen, at_end = [], set()
    try:
        while len(at_end) < len(partitions):
            msg = consumer.poll(5.0)
            assert msg is not None, f"{topic}: no end of partition"
            if msg.error() is None:
                seen.append((msg.partition(), msg.key()))
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
    finally:
        consumer.close()
    return seen


# On Tansu the audit once found part of batch 1's customer_events missing, not reproduced since (docs/limits.md):
# the plain reader's count comes before the audit, whose report names the offsets it read, so that a
# recurrence tells a read cut short from a record lost.
@pytest.mark.parametrize("broker_name", [pytest.param("apache", marks=pytest.mark.slow), pytest.param("noida", marks=pytest.mark.slow),
                                         pytest.param("tansu", marks=pytest.mark.slow)])
def test_two_topics_a_release_between_batches_and_every_output_replays_equal(broker_name, _brokers, tmp_path,
                                                                           spark_connect_server, postgres_server,
                                                                           monkeypatch, capsys, e2e_rest_catalog):
    broker = _brokers.get(broker_name)  # the shop's topics are its own: no other test writes them
    config = broker.config()
    ensure_topics(config, ["shop_orders", "shop_payments", "shop_dead_letter"], partitions=2)
    ensure_topics(config, ["shop_customer_events"], partitions=3)
    dags, warehouse = tmp_path / "dags", f"file://{tmp_path}/warehouse"
    deploy(dags, release=1)
    airflow = onceflow_airflow(tmp_path / "airflow", broker, warehouse, dags_folder=dags,
                               spark_connect=spark_connect_server, extra_env={"ONCEFLOW_SCHEDULE": "none"},
                               postgres=postgres_server, iceberg_rest=emptied(e2e_rest_catalog))
    with postgres_server.connect(autocommit=True) as conn:  # a table of the example's own, fresh for each run,
        conn.execute("DROP TABLE IF EXISTS public.shop_payments")  # and no marker of an earlier run's ledger
        if conn.execute("SELECT to_regclass('public.onceflow_prepared_splits')").fetchone()[0]:
            conn.execute("DELETE FROM public.onceflow_prepared_splits WHERE pipeline = 'shop_orders'")
    airflow.migrate()

    first = generate(120, seed=1, coupons=False)
    produce(config, first)
    run = airflow.dags_test(DAG_ID, timeout=900)
    assert run.succeeded and run.tasks == COMMITTED_RUN, run.describe()

    second = generate(90, seed=2, coupons=True, start_id=1000)
    deploy(dags, release=2)
    produce(config, second)
    run = airflow.dags_test(DAG_ID, timeout=900)
    assert run.succeeded and run.tasks == COMMITTED_RUN, run.describe()

    sys.path.insert(0, str(dags))  # the user's package, as the DAG processor imports it
    try:
        from shop_pipelines.orders import ORDERS

        runtime = PipelineRuntime(ORDERS, Deployment(warehouse, broker, None, embedded_catalogs(warehouse, None, rest=e2e_rest_catalog)))
        batches = [runtime.coordinator.describe(seq) for seq in (1, 2)]
        assert [b.state.value for b in batches] == ["committed", "committed"]
        assert [b.plan.records for b in batches] == [len(first), len(second)]
        assert {r.topic for r in batches[0].plan.ranges} == {"shop_orders", "shop_payments"}

        # The column of release 2: null in batch 1, normalized codes in batch 2, to a plain reader.
        lines = read_committed(sink_kind("files").location(ORDERS.sink("order_lines"), warehouse))
        by_batch: dict[str, set] = {}
        for row in lines.select(["batch_id", "coupon"]).to_pylist():
            by_batch.setdefault(row["batch_id"], set()).add(row["coupon"])
        assert by_batch["0000000001"] == {None}
        assert by_batch["0000000002"] == {None, "SPRING10", "WELCOME5"}

        # Keyed as a Java producer keys: toPositive(murmur2(key)) % partitions, over all three partitions;
        # every record there for a plain read_committed reader.
        malformed = sum(r.malformed for r in first + second)
        placed = keyed_partitions(config, "shop_customer_events")
        assert len(placed) == len(first) + len(second) - malformed
        assert all(p == (murmur2(key) & 0x7FFFFFFF) % 3 for p, key in placed)
        assert {p for p, _ in placed} == {0, 1, 2}

        # `onceflow audit`: every batch computed again from its plan, with the code of release 2,
        # on the Spark Connect server; the deployment from the environment, as a user runs it.
        monkeypatch.setenv(WAREHOUSE_VAR, warehouse)
        monkeypatch.setenv(KAFKA_BOOTSTRAP_VAR, broker.bootstrap)
        monkeypatch.setenv(ICEBERG_CATALOGS_VAR, json.dumps(runtime.deployment.catalogs))
        audit = ["audit", "--pipeline", "shop_orders", "--spec", "shop_pipelines.orders:ORDERS",
                 "--remote", spark_connect_server.address, "--json"]
        monkeypatch.setenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", spark_connect_server.token)  # the client's own variable
        for name, value in broker.profile_env().items():  # Tansu's profile: the votes say which records count
            monkeypatch.setenv(name, value)
        monkeypatch.setenv(f"AIRFLOW_CONN_{POSTGRES_CONN_ID.upper()}", postgres_server.uri())
        capsys.readouterr()
        assert main(audit) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["ok"] and report["audited_batches"] == ["0000000001", "0000000002"], report
        for output in report["outputs"].values():
            assert [b["batch"] for b in output["batches"]] == ["0000000001", "0000000002"], output
            assert all(b["found"] == b["expected"] > 0 for b in output["batches"]), output
        assert report["outputs"]["shop_dead_letter"]["found"] == malformed
        assert report["outputs"]["customer_events"]["found"] == len(first) + len(second) - malformed

        # A lost Parquet file of batch 1: exit code 1, the output and the batch named.
        lost = next((tmp_path / "warehouse" / "shop" / "order_lines" / "batch=0000000001").glob("part-*.parquet"))
        lost.unlink()
        assert main([*audit, "--batches", "1"]) == 1
        report = json.loads(capsys.readouterr().out)
        (lines,) = report["outputs"]["order_lines"]["batches"]
        assert lines["missing"] > 0 and not report["outputs"]["order_lines"]["ok"], report
        assert all(o["ok"] for name, o in report["outputs"].items() if name != "order_lines"), report
    finally:
        sys.path.remove(str(dags))
        for name in [m for m in sys.modules if m.split(".")[0] == "shop_pipelines"]:
            del sys.modules[name]

    # The payments, in PostgreSQL through a sink kind of another package: each once, nothing left prepared.
    with postgres_server.connect(autocommit=True) as conn:
        stored = conn.execute("SELECT order_id, onceflow_batch FROM public.shop_payments").fetchall()
        lingering = [x.gtrid for x in conn.tpc_recover() if x.gtrid.startswith("onceflow:shop_orders:")]
    payments = [r for r in first + second if r.topic == "shop_payments" and not r.malformed]
    assert len(stored) == len(payments) > 0 and lingering == []
    assert {b for _, b in stored} == {"0000000001", "0000000002"}

    # The table is partitioned by the date column; a reader's filter on it reads only that day's files.
    table = table_of(runtime, "daily_sales")
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("order_date", "identity")]
    files = list(table.scan().plan_files())
    days = {task.file.partition[0] for task in files}
    assert len(days) >= 3
    day = min(days)
    day = date(1970, 1, 1) + timedelta(days=day) if isinstance(day, int) else day  # Iceberg keeps days
    one_day = list(table.scan(row_filter=f"order_date = '{day.isoformat()}'").plan_files())
    assert 0 < len(one_day) < len(files)
    assert sum(table.scan().to_arrow()["orders"].to_pylist()) == sum(
        1 for r in first + second if r.topic == "shop_orders" and not r.malformed)

