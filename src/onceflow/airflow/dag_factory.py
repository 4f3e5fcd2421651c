"""Build the Airflow DAG of a pipeline from its spec (Airflow DAG-parsing time).

    from onceflow.airflow.dag_factory import pipeline_dag
    from my_pipelines.orders import ORDERS

    dag = pipeline_dag(ORDERS)

gives ``plan >> spark >> commit`` with ``rollback`` on ``one_failed``, one
run at a time, Asset events per output on commit. ``plan_in_spark_task=True`` gives
``spark >> commit`` (and ``rollback``): the spark task plans the batch in its own process before
its job, which saves a task's start and a scheduler gap per batch (docs/running.md). An interval pipeline
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

``pipeline_dag`` composes steps that each take the settings resolved once: ``dag_settings``
(arguments, environment, defaults), ``dag_schedule`` (the schedule's four forms), then
``run_params``, ``dag_arguments`` and ``add_tasks`` here.

Fault injection (tests, chaos runs): ``ONCEFLOW_FAULTS`` (see faults.py)
arms the Airflow tasks and, passed on, the Spark job (driver and workers).
The run param ``faults`` does the same for one DAG run, only on workers that
set ``ONCEFLOW_FAULT_INJECTION=enabled`` (a test deployment's opt-in).
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import DAG, Param, TriggerRule

from onceflow.core import faults
from onceflow.config.settings import ICEBERG_CATALOGS_VAR, ConfigurationError
from onceflow.airflow.assets import alias, asset_uri, outputs  # noqa: F401  (outputs, asset_uri: where DAG files import them from)
from onceflow.airflow.dag_schedule import dag_schedule
from onceflow.airflow.dag_settings import SPEC_SCHEDULE, DagSettings, dag_settings
from onceflow.airflow.deployed import COMMIT_TASK_ID, PLAN_TASK_ID, SPARK_TASK_ID, catalog_conn_ids
from onceflow.config.deployment import is_s3_uri
from onceflow.spark.shipping import SUBMIT_APPLICATION, shipped_code
from onceflow.pipeline.spec import INTERVAL, PipelineSpec
from onceflow.airflow.operators.batch import CommitBatchOperator, PlanBatchOperator, RollbackBatchOperator
from onceflow.airflow.operators.spark import OnceflowSparkSubmitOperator, submit_defaults
from onceflow.core.planning.run_inputs import MAX_RECORDS, REPLACE_COMMITTED

# The DAG settings an offsets pipeline refuses, each with the values refused. catchup: any value the
# scheduler takes as true (1, "true", numpy.True_ as well as True); max_active_runs: anything but 1.
OFFSETS_REFUSES = {
    "max_active_runs": lambda value: value not in (False, 1),
    "catchup": bool,
}
# What a DAG argument is when pipeline_dag is not given it: an offsets pipeline's batches are sequential
# by construction (I1); an interval pipeline may take more runs at a time, or catchup, when given them.
DAG_DEFAULTS = {"max_active_runs": 1, "catchup": False}


def pipeline_dag(
    spec: PipelineSpec,
    *,
    warehouse: str | None = None,
    schedule: Any = SPEC_SCHEDULE,
    kafka_conn_id: str | None = None,
    spark_kafka_conn_id: str | None = None,
    aws_conn_id: str | None = None,
    spark_conn_id: str | None = None,
    spark_conf: dict[str, str] | None = None,
    spark_binary: str | None = None,
    spark_timeout: timedelta | None = None,
    plan_in_spark_task: bool = False,
    retries: int = 1,
    start_date: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc),
    dag_id: str | None = None,
    **dag_kwargs: Any,
):
    """The pipeline's DAG: its settings resolved once, then each part of the DAG from them."""
    settings = dag_settings(spec, dag_id=dag_id, warehouse=warehouse, schedule=schedule, kafka_conn_id=kafka_conn_id,
                            spark_kafka_conn_id=spark_kafka_conn_id, aws_conn_id=aws_conn_id,
                            spark_conn_id=spark_conn_id, spark_conf=spark_conf, spark_binary=spark_binary,
                            spark_timeout=spark_timeout, plan_in_spark_task=plan_in_spark_task)
    with DAG(
        dag_id=settings.dag_id,
        schedule=dag_schedule(settings),
        start_date=start_date,
        default_args={"retries": retries, "retry_delay": timedelta(seconds=5)},
        params=run_params(settings),
        tags=["onceflow", "exactly-once"],
        doc_md=dag_doc(settings),
        **dag_arguments(settings, dag_kwargs),
    ) as dag:
        add_tasks(settings)
    return dag


def run_params(settings: DagSettings) -> dict[str, Any]:
    """The DAG's params: its batches' own (the interval's or the offsets'), the transform's and ``faults``."""
    spec = settings.spec
    if spec.batches == INTERVAL:
        batch_params = {REPLACE_COMMITTED: Param(
            False, type="boolean",
            description="If this run's interval is already committed, process it again and replace its outputs "
            "(files: the old batch is removed in the same commit; Kafka: only outputs declared republish=True, "
            "whose records are published again; other Kafka outputs refuse)",
        )}
    else:
        batch_params = {MAX_RECORDS: Param(
            spec.max_records_per_partition, type=["null", "integer"], minimum=1,
            description="Upper bound of records read per input partition in this batch",
        )}
    return {
        **batch_params,
        # The transform's own (``PipelineSpec.run_params``); any other conf key is refused by the task that plans.
        **{name: Param(**schema) for name, schema in spec.run_params.items()},
        faults.RUN_PARAM: Param(
            None, type=["null", "string"],
            description=f"Test deployments only: faults to inject in this run ({faults.ENV_VAR} syntax, "
            f"e.g. ledger.decision.after_write=crash); refused unless the workers set "
            f"{faults.RUN_PARAM_GUARD}={faults.RUN_PARAM_GUARD_VALUE}",
        ),
    }


def dag_arguments(settings: DagSettings, dag_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The DAG's other arguments: ``dag_kwargs`` as given, refused where an offsets pipeline cannot
    honour them, with ``DAG_DEFAULTS`` for those omitted."""
    spec = settings.spec
    if spec.batches != INTERVAL:
        for setting, refused in OFFSETS_REFUSES.items():
            if setting in dag_kwargs and refused(dag_kwargs[setting]):
                raise ConfigurationError(
                    f"pipeline {spec.name!r}: {setting}={dag_kwargs[setting]!r} needs batches='interval': the batches "
                    "of an offsets pipeline follow each other, one run at a time, whatever the runs' dates"
                )
    return {**DAG_DEFAULTS, **dag_kwargs}


def dag_doc(settings: DagSettings) -> str:
    """The DAG's description: its input topics and its outputs."""
    spec = settings.spec
    return f"Exactly-once pipeline `{spec.name}`: {', '.join(spec.topics)} → " + ", ".join(
        f"{s.name} ({s.kind}: {s.target})" for s in spec.sinks)


def add_tasks(settings: DagSettings) -> None:
    """``plan >> spark >> [commit, rollback]`` (``spark >> [commit, rollback]`` when the spark task plans),
    in the DAG being defined."""
    deployed, spec = settings.deployed, settings.spec
    plan_task_id = SPARK_TASK_ID if settings.plan_in_spark_task else PLAN_TASK_ID
    # Every protocol task may finish a batch (a plan's recovery, a rollback that finds COMMIT decided):
    # each announces the committed batches it saw that no event carries yet, through the pipeline's
    # alias (its inlet, to read those events, and its outlet).
    assets = dict(inlets=[alias(spec)], outlets=[alias(spec)])
    common = dict(pipeline=spec, warehouse=deployed.warehouse, kafka_conn_id=deployed.kafka_conn_id,
                  aws_conn_id=deployed.aws_conn_id, plan_task_id=plan_task_id, **assets)
    spark = OnceflowSparkSubmitOperator(
        task_id=SPARK_TASK_ID,
        application=str(SUBMIT_APPLICATION),
        conn_id=settings.spark_conn_id,
        name=f"onceflow-{spec.name}",
        py_files=",".join(shipped_code(spec)),
        # The batch is added at run time (operators.spark), the spec goes in the environment: never an argument.
        application_args=["--pipeline", spec.name],
        conf={**submit_defaults(), **settings.spark_conf},
        env_vars=spark_env(settings),
        spark_binary=settings.spark_binary,
        execution_timeout=settings.spark_timeout,
        deployed=deployed,
        plans=settings.plan_in_spark_task,
        **(assets if settings.plan_in_spark_task else {}),
    )
    commit = CommitBatchOperator(task_id=COMMIT_TASK_ID, trigger_rule=TriggerRule.ALL_SUCCESS,
                                 doc_json=deployed.to_doc(), **common)
    rollback = RollbackBatchOperator(task_id="rollback", trigger_rule=TriggerRule.ONE_FAILED, retries=3, **common)
    # commit and rollback are both leaves, as docs/protocol.md says: the run's state
    # is then failed whenever the batch did not commit (a rollback that
    # succeeds must not turn a failed batch into a successful run).
    spark >> [commit, rollback]
    if not settings.plan_in_spark_task:
        PlanBatchOperator(task_id=PLAN_TASK_ID, **common) >> spark


def spark_env(settings: DagSettings) -> dict[str, str]:
    """The spark task's environment: templates of its connections, rendered at run time (Airflow
    masks their secrets in logs and in the rendered-template view), never their values."""
    kafka_conn_id, warehouse, aws_conn_id = settings.spark_kafka_conn_id, settings.deployed.warehouse, settings.deployed.aws_conn_id
    catalogs = catalog_conn_ids(settings.spec)
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
