"""``onceflow demo``: the clickstream pipeline end to end, through Airflow.

What `make demo` runs. On a clean embedded stack of its own (under
``<ONCEFLOW_HOME>/demo``) it:

1. starts Kafka and S3, and on a local warehouse Iceberg's REST catalog (the
   SQL catalog on an S3 one: the REST server writes no S3), creates the
   topics and produces click events, some of them malformed;
2. starts a Spark Connect server, the fastest Spark the embedded stack
   offers: the spark tasks are its clients, so no batch starts a JVM;
   then runs batches of the ``clickstream_exactly_once`` DAG with ``airflow
   dags test`` (Airflow itself runs plan, spark, commit / rollback), printing
   each batch's time and its tasks' times;
3. injects a failure after pre-commit into one batch's Spark job, so the
   rollback task aborts it, and the next run re-reads the same records;
4. audits every output against the input and prints a summary, then the
   Iceberg table's snapshots: one per committed batch, none of the aborted one.

Exit code 0 only when the audit finds every input record exactly once.
"""

from __future__ import annotations

import json
import shlex
import shutil
import time

from onceflow.core.batch_id import BatchId
from onceflow.config.settings import ICEBERG_CATALOGS_VAR
from onceflow_devkit.services.kafka_broker import DEFAULT_BROKER
from onceflow_devkit.services.stack import EmbeddedStack, onceflow_home
from onceflow_devkit.services.iceberg_catalog import embedded_catalogs, forget_embedded_catalogs, table_history

DAG_ID = "clickstream_exactly_once"
EVENTS = 3000
MALFORMED_RATIO = 0.05
RECORDS_PER_PARTITION = 600  # per batch: 3000 events over 2 partitions -> 3 batches
FAULT = "job.after_votes=raise"


def _say(text: str) -> None:
    print(text, flush=True)


def stop_demo() -> int:
    """End what ``run_demo(keep_running=True)`` left running: Airflow, then the stack."""
    from onceflow_devkit.airflow_env import DAGS_FOLDER
    from onceflow_devkit.local_airflow import LocalAirflow

    home = onceflow_home() / "demo"
    if (home / "airflow").is_dir():
        LocalAirflow(home / "airflow", DAGS_FOLDER).stop(grace=10)
    _spark_connect_process(home).stop(grace=10)
    _iceberg_rest_process(home).stop(grace=10)
    EmbeddedStack(home / "stack").down()
    _say(f"[demo]    Airflow and the stack of {home} are stopped")
    return 0


def _spark_connect_process(home):
    from onceflow_devkit.services.process import ManagedProcess

    return ManagedProcess("spark-connect", home / "spark-connect")


def _iceberg_rest_process(home):
    from onceflow_devkit.services.process import ManagedProcess

    return ManagedProcess("iceberg-rest", home / "iceberg-rest")


def run_demo(broker: str = DEFAULT_BROKER, warehouse: str | None = None, keep_running: bool = False) -> int:
    from onceflow_examples.clickstream import CLICKSTREAM, CLICKSTREAM_HOURLY
    from onceflow_examples.clickstream_data import generate, produce

    from onceflow.kafka.admin import ensure_topics
    from onceflow.pipeline.runtime import Deployment, PipelineRuntime, is_s3_uri
    from onceflow_devkit.airflow_env import DAGS_FOLDER, onceflow_airflow
    from onceflow.ops.audit.replay import replay_audit
    from onceflow.ops.cli import audit_session
    from onceflow_devkit.audit.clickstream_audit import audit_clickstream
    from onceflow_devkit.local_airflow.metadata import MetadataDb
    from onceflow_devkit.local_airflow.metadata_database import SQLITE_FALLBACK
    from onceflow_devkit.services.rest_catalog import start_rest_catalog
    from onceflow_devkit.services.spark_connect import start_connect_server

    started = time.monotonic()
    home = onceflow_home() / "demo"
    stack = EmbeddedStack(home / "stack")
    stack.down()
    spark_connect = _spark_connect_process(home)
    spark_connect.stop(grace=10)
    iceberg_rest = _iceberg_rest_process(home)
    iceberg_rest.stop(grace=10)
    shutil.rmtree(home, ignore_errors=True)  # every demo starts from nothing
    info = stack.up(broker=broker)
    _say(f"[stack]   kafka ({info.kafka.name}) on {info.kafka.bootstrap}, S3 on {info.s3.endpoint_url}; state in {home}")
    try:
        # Its Python workers get the embedded S3's keys, as a deployment gives them to its server.
        server = start_connect_server(spark_connect, env=info.env())
        _say(f"[spark]   Spark Connect server on {server.address} (local[2]); the spark tasks are its clients")
        if warehouse is None:
            warehouse = f"file://{home / 'warehouse'}"
        s3 = info.s3 if is_s3_uri(warehouse) else None
        if s3 is not None:
            s3.client().create_bucket(Bucket=warehouse.split("://", 1)[1].split("/", 1)[0])
        forget_embedded_catalogs(warehouse)  # the demo starts from nothing, its S3 store included
        rest = None if s3 is not None else start_rest_catalog(iceberg_rest, f"{warehouse.rstrip('/')}/iceberg")
        catalog = f"Iceberg REST catalog on {rest.uri}" if rest else "Iceberg SQL catalog (an S3 warehouse)"
        _say(f"[iceberg] {catalog}")
        runtime = PipelineRuntime(CLICKSTREAM, Deployment(warehouse, info.kafka, s3,
                                                          embedded_catalogs(warehouse, s3, rest=rest)))

        # The hourly example's too: its DAG is there (paused) to be backfilled from the UI.
        topics = ["clicks", *(s.target for spec in (CLICKSTREAM, CLICKSTREAM_HOURLY) for s in spec.sinks if s.kind == "kafka")]
        ensure_topics(info.kafka.config(), topics, partitions=2)
        events = generate(EVENTS, seed=2026, malformed_ratio=MALFORMED_RATIO)
        produce(info.kafka.config(), "clicks", events)
        malformed = sum(r.reason is not None for r in events)
        _say(f"[input]   produced {len(events)} click events to 'clicks' ({malformed} malformed on purpose)")

        airflow = onceflow_airflow(home / "airflow", info.kafka, warehouse, s3, spark_connect=server,
                                   postgres=info.postgres, iceberg_rest=rest)
        airflow.migrate()
        faulty = onceflow_airflow(home / "airflow", info.kafka, warehouse, s3, spark_connect=server,
                                  postgres=info.postgres, extra_env={"ONCEFLOW_FAULTS": FAULT}, iceberg_rest=rest)
        metadata = MetadataDb(airflow.sql_alchemy_conn)
        database = f"PostgreSQL on {info.postgres.host}:{info.postgres.port}" if info.postgres else SQLITE_FALLBACK
        _say(f"[airflow] home {home / 'airflow'}; warehouse {warehouse}; metadata database: {database}")

        conf = {"max_records_per_partition": RECORDS_PER_PARTITION}
        # 1500 records per partition, 600 per partition and batch: the retry
        # re-reads the aborted batch's ranges, the last run takes the rest.
        runs = [("normal", airflow), ("fault", faulty), ("retry", airflow), ("normal", airflow)]
        for n, (kind, instance) in enumerate(runs, 1):
            result = instance.dags_test(DAG_ID, conf=conf, timeout=900)
            batch = runtime.coordinator.describe()
            what = f"batch {batch.batch_id}: {batch.plan.records} records, {batch.state.value}" if batch else "no batch"
            if batch and batch.plan.replay_of:
                what += f" (replays aborted batch {BatchId(batch.plan.replay_of)})"
            ran = metadata.task_seconds(DAG_ID, result.run_id) if result.run_id else {}
            timings = ", ".join(f"{task} {result.tasks[task]} in {seconds:.1f} s" for task, seconds in ran.items()
                                if result.tasks.get(task) in ("success", "failed"))
            _say(f"[run {n}]   {kind:<6} {result.run_state or 'no run'} in {result.seconds:.1f} s — {what}; {timings}")
            expected_ok = kind != "fault"
            if result.succeeded != expected_ok:
                _say(f"[run {n}]   unexpected outcome: {result.describe()}")
                return 1

        report = audit_clickstream(runtime, hides_aborted=info.kafka.broker.hides_aborted)
        _say(report.summary())
        with audit_session(runtime.spec, remote=server.url) as spark:  # `onceflow audit --remote`: replayed on the server
            replayed = replay_audit(spark, runtime)
        _say(replayed.summary())
        for line in table_history(runtime, "page_minute_table"):
            _say(line)
        ok = report.ok and replayed.ok
        _say(f"[demo]    {'exactly once: every input record counted once in every output, every batch replayed equal' if ok else 'EXACTLY-ONCE VIOLATED'}"
             f" ({time.monotonic() - started:.0f} s).")
        # ONCEFLOW_HOME lets `onceflow oracle-audit` know the broker (Tansu's deviations) by the stack's name.
        catalogs_env = home / "iceberg.env"  # the catalog's properties (the S3 keys, on an S3 warehouse): not printed
        catalogs_env.write_text(f"{ICEBERG_CATALOGS_VAR}={shlex.quote(json.dumps(runtime.deployment.catalogs))}\n")
        recheck = (f"set -a; . {stack.env_file}; . {catalogs_env}; set +a; export ONCEFLOW_HOME={home / 'stack'} "
                   f"ONCEFLOW_WAREHOUSE={warehouse} ONCEFLOW_DAGS_FOLDER={DAGS_FOLDER}\n"
                   "          .venv/bin/onceflow status --pipeline clickstream; .venv/bin/onceflow audit --pipeline clickstream"
                   "; .venv/bin/onceflow oracle-audit --pipeline clickstream")
        if keep_running:
            airflow.start(timeout=180, detach=True)
            _say(f"[ui]      the onceflow page: {airflow.api_url}/plugin/onceflow (Airflow's UI, Plugins > onceflow);"
                 f" each DAG run has an 'onceflow batch' tab")
            _say(f"[demo]    the stack, the catalog and Airflow are still up (`onceflow demo --stop` ends them); look again with:\n          {recheck}")
        else:
            _say("[demo]    run `onceflow demo --keep-running` to look at the batches, outputs and the onceflow page afterwards")
        return 0 if ok else 1
    finally:
        if not keep_running:
            spark_connect.stop(grace=10)
            iceberg_rest.stop(grace=10)
            stack.down()
            _say("[stack]   stopped")
