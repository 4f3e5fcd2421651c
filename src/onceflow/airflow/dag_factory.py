"""Build the Airflow DAG of a pipeline from its spec (Airflow DAG-parsing time).

    from onceflow.airflow.dag_factory import pipeline_dag
    from my_pipelines.orders import ORDERS

    dag = pipeline_dag(ORDERS)

gives ``plan >> spark >> commit`` with ``rollback`` on ``one_failed``, one
run at a time, Asset events per output on commit. An interval pipeline
(``batches="interval"``) gets a schedule with data intervals (a cron
expression becomes a ``CronDataIntervalTimetable``), accepts
``max_active_runs`` and ``catchup``, and can be backfilled. The spark task submits
``onceflow/spark/submit.py`` from the installed package and ships, with
``--py-files``, onceflow and the package that holds the spec's transform. Deployment settings come
from arguments or, when omitted, from the environment at parse time:
``ONCEFLOW_WAREHOUSE`` (required), ``ONCEFLOW_SPARK_CONN`` (default
``onceflow_spark``), ``ONCEFLOW_KAFKA_CONN`` (``onceflow_kafka``),
``ONCEFLOW_SPARK_KAFKA_CONN`` (the spark task's own Kafka connection, for a principal that only
writes: docs/security.md; default: the Kafka connection), ``ONCEFLOW_S3_CONN`` (``onceflow_s3``), ``ONCEFLOW_SCHEDULE`` (a cron
expression, ``none`` for triggered runs only, or ``input: records=N,
max_age_s=T``; default: the spec's).
``schedule=when_input(records=N, max_age_s=T)`` (``onceflow.config.input_schedule``)
starts a run when the input has waited long enough instead.

Fault injection (tests, chaos runs): ``ONCEFLOW_FAULTS`` (see faults.py)
arms the Airflow tasks and, passed on, the Spark job (driver and workers).
The run param ``faults`` does the same for one DAG run, only on workers that
set ``ONCEFLOW_FAULT_INJECTION=enabled`` (a test deployment's opt-in).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from onceflow.core import faults
from onceflow.config.settings import ICEBERG_CATALOGS_VAR, ConfigurationError
from onceflow.airflow.assets import alias, asset_uri, outputs  # noqa: F401  (outputs, asset_uri: where DAG files import them from)
from onceflow.airflow.deployed import PLAN_TASK_ID, DeployedPipeline, catalog_conn_ids
from onceflow.config.deployment import is_s3_uri
from onceflow.config.input_schedule import ABORT_BACKOFF_S, InputSchedule, parse_schedule
from onceflow.sinks import sink_kind
from onceflow.spark.shipping import SUBMIT_APPLICATION, shipped_code
from onceflow.pipeline.spec import INTERVAL, OFFSETS, PipelineSpec

# A spark task may not hold the pipeline's one run slot forever; pass spark_timeout= for longer batches.
DEFAULT_SPARK_TIMEOUT = timedelta(hours=2)
# The DAG settings an offsets pipeline refuses, each with the values refused. catchup: any value the
# scheduler takes as true (1, "true", numpy.True_ as well as True); max_active_runs: anything but 1.
OFFSETS_REFUSES = {
    "max_active_runs": lambda value: value not in (False, 1),
    "catchup": bool,
}


def spark_timeout_of(spec: PipelineSpec) -> timedelta:
    """The spark task's execution_timeout: the shortest time any sink's pre-commit
    stays committable (work after that is refused by the commit), else the default."""
    lifetimes = [life for s in spec.sinks if (life := sink_kind(s.kind).vote_lifetime(s)) is not None]
    return min(lifetimes, default=DEFAULT_SPARK_TIMEOUT)


def default_spark_binary() -> str:
    """The spark-submit installed beside this interpreter (the pyspark wheel's),
    else the one on PATH, as the Spark provider does."""
    beside = Path(sys.executable).parent / "spark-submit"
    return str(beside) if beside.exists() else "spark-submit"


def _spark_env(kafka_conn_id: str, aws_conn_id: str, warehouse: str, catalogs: list[str]) -> dict[str, str]:
    # Rendered at run time from the connections; Airflow masks their secrets
    # in logs and in the rendered-template view.
    env = {
        "PYSPARK_PYTHON": sys.executable,
        "ONCEFLOW_KAFKA_BOOTSTRAP": "{{ conn.%s.extra_dejson['bootstrap.servers'] }}" % kafka_conn_id,
        "ONCEFLOW_KAFKA_CONFIG": "{{ conn.%s.extra }}" % kafka_conn_id,
        "ONCEFLOW_WAREHOUSE": warehouse,
        "ONCEFLOW_FAULTS": ",".join(
            filter(None, [os.environ.get(faults.ENV_VAR, ""), "{{ params.%s or '' }}" % faults.RUN_PARAM if faults.run_param_allowed() else ""])
        ),
    }
    if catalogs:
        env[ICEBERG_CATALOGS_VAR] = "{%s}" % ", ".join('"%s": {{ conn.%s.extra }}' % (c, c) for c in catalogs)
    if is_s3_uri(warehouse):
        env.update(
            {
                "ONCEFLOW_S3_ENDPOINT": "{{ conn.%s.extra_dejson.get('endpoint_url', '') }}" % aws_conn_id,
                "AWS_ACCESS_KEY_ID": "{{ conn.%s.login }}" % aws_conn_id,
                "AWS_SECRET_ACCESS_KEY": "{{ conn.%s.password }}" % aws_conn_id,
                "AWS_SESSION_TOKEN": "{{ conn.%s.extra_dejson.get('aws_session_token', '') }}" % aws_conn_id,
                "AWS_DEFAULT_REGION": "{{ conn.%s.extra_dejson.get('region_name', '') }}" % aws_conn_id,
            }
        )
    return env


def input_asset(spec: PipelineSpec, schedule: InputSchedule, dag_id: str, warehouse: str, kafka_conn_id: str,
                aws_conn_id: str | None, spark_timeout: timedelta):
    """The Asset standing for the DAG's input, watched by the pipeline's InputLagTrigger (one per DAG:
    two DAGs of one spec, say staging and production, each start only their own runs)."""
    from airflow.sdk import Asset, AssetWatcher

    from onceflow.airflow.triggers.input_lag import InputLagTrigger

    if spec.batches != OFFSETS:
        raise ConfigurationError(f"pipeline {spec.name!r} reads data intervals: its runs follow its timetable, "
                                 "not its input; when_input() is for offsets pipelines")
    schedule.check(spec.name)
    if schedule.stall_s is None:
        schedule = replace(schedule, stall_s=spark_timeout.total_seconds() + ABORT_BACKOFF_S)
    # The trigger needs none of the params (its kwargs are stored).
    trigger = InputLagTrigger(dag_id=dag_id, spec_json=spec.without_params().to_json(), warehouse=warehouse,
                              kafka_conn_id=kafka_conn_id, aws_conn_id=aws_conn_id, records=schedule.records,
                              max_age_s=schedule.max_age_s, poll_s=schedule.poll_s, stall_s=schedule.stall_s)
    return Asset(name=f"onceflow.{dag_id}.input", uri=f"onceflow://{dag_id}/input", group="onceflow",
                 extra={"topics": list(spec.topics), "kafka_conn_id": kafka_conn_id},
                 watchers=[AssetWatcher(name=f"onceflow.{dag_id}.input_lag", trigger=trigger)])


def interval_schedule(spec: PipelineSpec, schedule: Any):
    """The schedule of an interval pipeline: one whose runs have data intervals.
    A cron expression becomes a ``CronDataIntervalTimetable`` in UTC (Airflow 3
    gives a bare cron string a trigger timetable, whose runs have no interval)."""
    from airflow.timetables.interval import CronDataIntervalTimetable

    if schedule is None:
        raise ConfigurationError(
            f"pipeline {spec.name!r} reads data intervals (batches='interval'), so its DAG needs a schedule: give the "
            "spec (or pipeline_dag, or ONCEFLOW_SCHEDULE) a cron expression such as '@hourly', or a timetable"
        )
    return CronDataIntervalTimetable(schedule, timezone="UTC") if isinstance(schedule, str) else schedule


def pipeline_dag(
    spec: PipelineSpec,
    *,
    warehouse: str | None = None,
    schedule: Any = "spec",
    kafka_conn_id: str | None = None,
    spark_kafka_conn_id: str | None = None,
    aws_conn_id: str | None = None,
    spark_conn_id: str | None = None,
    spark_conf: dict[str, str] | None = None,
    spark_binary: str | None = None,
    spark_timeout: timedelta | None = None,
    retries: int = 1,
    start_date: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc),
    dag_id: str | None = None,
    **dag_kwargs: Any,
):
    from airflow.sdk import DAG, Param, TriggerRule

    from onceflow.airflow.operators.batch import CommitBatchOperator, PlanBatchOperator, RollbackBatchOperator
    from onceflow.core.planning.run_inputs import MAX_RECORDS, REPLACE_COMMITTED
    from onceflow.airflow.operators.spark import OnceflowSparkSubmitOperator, submit_defaults

    warehouse = warehouse or os.environ.get("ONCEFLOW_WAREHOUSE")
    if not warehouse:
        raise ConfigurationError(
            f"pipeline {spec.name!r}: no warehouse. Pass warehouse='s3://bucket/prefix' (or file:///path) to "
            "pipeline_dag, or set ONCEFLOW_WAREHOUSE for the DAG processor and workers"
        )
    kafka_conn_id = kafka_conn_id or os.environ.get("ONCEFLOW_KAFKA_CONN", "onceflow_kafka")
    spark_kafka_conn_id = spark_kafka_conn_id or os.environ.get("ONCEFLOW_SPARK_KAFKA_CONN") or kafka_conn_id
    aws_conn_id = aws_conn_id or os.environ.get("ONCEFLOW_S3_CONN", "onceflow_s3")
    spark_conn_id = spark_conn_id or os.environ.get("ONCEFLOW_SPARK_CONN", "onceflow_spark")
    # Every protocol task may finish a batch (a plan's recovery, a rollback that finds COMMIT decided):
    # each announces the committed batches it saw that no event carries yet, through the pipeline's
    # alias (its inlet, to read those events, and its outlet).
    common = dict(pipeline=spec, warehouse=warehouse, kafka_conn_id=kafka_conn_id, aws_conn_id=aws_conn_id,
                  inlets=[alias(spec)], outlets=[alias(spec)])

    if schedule == "spec":
        schedule = parse_schedule(os.environ.get("ONCEFLOW_SCHEDULE") or spec.schedule)
    if isinstance(schedule, InputSchedule):  # runs when data arrives: an Asset watched in the triggerer
        schedule = [input_asset(spec, schedule, dag_id or spec.name, warehouse, kafka_conn_id, aws_conn_id,
                                spark_timeout or spark_timeout_of(spec))]
    if spec.batches == INTERVAL:
        schedule = interval_schedule(spec, schedule)
        run_params = {REPLACE_COMMITTED: Param(
            False, type="boolean",
            description="If this run's interval is already committed, process it again and replace its outputs "
            "(files: the old batch is removed in the same commit; Kafka: only outputs declared republish=True, "
            "whose records are published again; other Kafka outputs refuse)",
        )}
    else:
        for setting, refused in OFFSETS_REFUSES.items():
            if setting in dag_kwargs and refused(dag_kwargs[setting]):
                raise ConfigurationError(
                    f"pipeline {spec.name!r}: {setting}={dag_kwargs[setting]!r} needs batches='interval': the batches "
                    "of an offsets pipeline follow each other, one run at a time, whatever the runs' dates"
                )
        run_params = {MAX_RECORDS: Param(
            spec.max_records_per_partition, type=["null", "integer"], minimum=1,
            description="Upper bound of records read per input partition in this batch",
        )}
    dag_kwargs.setdefault("max_active_runs", 1)  # an offsets pipeline's batches are sequential by construction (I1)
    dag_kwargs.setdefault("catchup", False)
    with DAG(
        dag_id=dag_id or spec.name,
        schedule=schedule,
        start_date=start_date,
        default_args={"retries": retries, "retry_delay": timedelta(seconds=5)},
        params={
            **run_params,
            # The transform's own (``PipelineSpec.run_params``); any other conf key is refused by the plan task.
            **{name: Param(**schema) for name, schema in spec.run_params.items()},
            faults.RUN_PARAM: Param(
                None, type=["null", "string"],
                description=f"Test deployments only: faults to inject in this run ({faults.ENV_VAR} syntax, "
                f"e.g. ledger.decision.after_write=crash); refused unless the workers set "
                f"{faults.RUN_PARAM_GUARD}={faults.RUN_PARAM_GUARD_VALUE}",
            ),
        },
        tags=["onceflow", "exactly-once"],
        doc_md=f"Exactly-once pipeline `{spec.name}`: {', '.join(spec.topics)} → "
        + ", ".join(f"{s.name} ({s.kind}: {s.target})" for s in spec.sinks),
        **dag_kwargs,
    ) as dag:
        deployed = DeployedPipeline(dag_id or spec.name, spec, warehouse, kafka_conn_id, aws_conn_id)
        plan = PlanBatchOperator(task_id=PLAN_TASK_ID, doc_json=deployed.to_doc(), **common)
        spark = OnceflowSparkSubmitOperator(
            task_id="spark",
            application=str(SUBMIT_APPLICATION),
            conn_id=spark_conn_id,
            name=f"onceflow-{spec.name}",
            py_files=",".join(shipped_code(spec)),
            application_args=[
                "--pipeline", spec.name,
                "--batch", "{{ ti.xcom_pull(task_ids='plan')['batch_seq'] }}",
            ],  # the spec goes in the environment, added at run time (operators.spark): never an argument
            conf={**submit_defaults(), **(spark_conf or {})},
            env_vars=_spark_env(spark_kafka_conn_id, aws_conn_id, warehouse, catalog_conn_ids(spec)),
            spark_binary=spark_binary or default_spark_binary(),
            execution_timeout=spark_timeout or spark_timeout_of(spec),
            deployed=deployed,
        )
        commit = CommitBatchOperator(task_id="commit", trigger_rule=TriggerRule.ALL_SUCCESS, **common)
        rollback = RollbackBatchOperator(task_id="rollback", trigger_rule=TriggerRule.ONE_FAILED, retries=3, **common)
        # commit and rollback are both leaves, as docs/protocol.md says: the run's state
        # is then failed whenever the batch did not commit (a rollback that
        # succeeds must not turn a failed batch into a successful run).
        plan >> spark >> [commit, rollback]
    return dag
