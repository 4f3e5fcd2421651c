"""The spark task: the Spark provider's SparkSubmitOperator, with five changes.

0. When its connection is a ``spark_connect`` connection (the Spark provider's
   type), the batch job runs in this task's process as a Spark Connect client
   of that server (``onceflow.spark.connect``): no spark-submit, no JVM per batch.

1. Its environment is rendered from the pipeline's connections at run time; a
   field the connection leaves empty (an S3 connection without keys, meaning
   the worker's own credential chain) must leave the worker's variable alone
   rather than set it to "" and hide the worker's own setting.
2. On ``yarn`` and ``k8s://`` masters the provider turns the environment into
   ``--conf spark.yarn.appMasterEnv.*`` / ``spark.kubernetes.driverEnv.*``
   arguments, which every user of the host sees in ``ps`` and which land in
   YARN launch contexts and pod specs. There, secrets are withheld: the driver
   gets its credentials from the platform (an instance or pod role, a
   Kubernetes secret through ``spark.kubernetes.driver.secretKeyRef.*``, or
   Hadoop credential providers), and fails naming what it lacks otherwise.
3. The pipeline's spec reaches the driver in ``$ONCEFLOW_SPEC_JSON``, added to the
   environment at run time, after the templates are rendered: its free-form ``params``
   may hold a token, and an argument or a rendered field shows in ``ps``, the task log
   and the UI (a '{{' in them would be rendered, too). Where the environment becomes
   arguments (2.), the spec goes without its params.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import replace
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.sdk import BaseHook

from onceflow.core import faults
from onceflow.airflow.deployed import PLAN_TASK_ID, DeployedPipeline
from onceflow.config.iceberg_catalogs import public_properties, secret_properties
from onceflow.airflow.hooks.kafka import cluster_from_extra
from onceflow.config.kafka_cluster import KafkaCluster, is_secret
from onceflow.config.settings import ICEBERG_CATALOGS_VAR, KAFKA_BOOTSTRAP_VAR
from onceflow.pipeline.spec import PipelineSpec
from onceflow.spark.shipping import SPEC_VAR
from onceflow.airflow.operators.steps import BatchSteps, task_runtime
from onceflow.pipeline.runtime import PipelineRuntime
from onceflow.spark.connect import ConnectBatchJob

log = logging.getLogger(__name__)
# Environment variables that hold a secret, or half of a key pair without its secret.
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
KAFKA_CONFIG_ENV = "ONCEFLOW_KAFKA_CONFIG"


def submit_defaults() -> dict[str, str]:
    """The Spark settings every spark-submit of a pipeline gets (before the DAG's own ``spark_conf``)."""
    return {"spark.ui.enabled": "false", "spark.pyspark.python": sys.executable}


def set_env_only(env: dict[str, Any] | None) -> dict[str, Any]:
    """``env`` without its empty values."""
    return {k: v for k, v in (env or {}).items() if v not in ("", None)}


def env_becomes_arguments(master: str) -> bool:
    """Does the Spark provider pass the environment as command-line arguments on ``master``?"""
    return "yarn" in master or "k8s" in master


def without_secrets(env: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``env`` without secret values, and the names of what was withheld."""
    kept = {k: v for k, v in env.items() if k not in SECRET_ENV}
    withheld = [k for k in env if k in SECRET_ENV]
    if KAFKA_CONFIG_ENV in kept:
        config = json.loads(kept[KAFKA_CONFIG_ENV] or "{}")
        secret_keys = sorted(k for k in config if is_secret(k))
        kept[KAFKA_CONFIG_ENV] = json.dumps({k: v for k, v in config.items() if k not in secret_keys})
        withheld += [f"{KAFKA_CONFIG_ENV}[{k}]" for k in secret_keys]
    if SPEC_VAR in kept:
        spec = PipelineSpec.from_json(kept[SPEC_VAR])
        withheld += [f"{SPEC_VAR}[params]"] if spec.params else []
        kept[SPEC_VAR] = spec.without_params().to_json()
    if ICEBERG_CATALOGS_VAR in kept:
        catalogs = json.loads(kept[ICEBERG_CATALOGS_VAR] or "{}")
        kept[ICEBERG_CATALOGS_VAR] = json.dumps({name: public_properties(props) for name, props in catalogs.items()})
        withheld += [f"{ICEBERG_CATALOGS_VAR}[{name}][{k}]" for name, props in sorted(catalogs.items())
                     for k in sorted(secret_properties(props))]
    return kept, withheld


class OnceflowSparkSubmitOperator(SparkSubmitOperator):
    def __init__(self, *, deployed: DeployedPipeline, plans: bool = False, **kwargs: Any):
        # The pipeline as deployed: its spec goes to a spark-submit driver in the environment, and a Spark
        # Connect job runs here from it. plans: this task plans the run's batch (a DAG without a plan task).
        super().__init__(**kwargs)
        self.deployed = deployed
        self.plans = plans
        self._connect_mode = False
        self._connect_job = None

    def submitted_env(self) -> dict[str, Any]:
        """The environment spark-submit gets: set values only, the pipeline's spec, and no secret where it
        would be an argument. Called in execute(), after rendering: nothing added here is a rendered field."""
        env = set_env_only(self.env_vars)
        env[SPEC_VAR] = self.deployed.spec.to_json()
        master = self._get_hook()._connection["master"]
        if not env_becomes_arguments(master):
            return env
        env, withheld = without_secrets(env)
        if withheld:
            log.warning(
                "master %s: %s not passed to the Spark driver (they would be command-line arguments); give the "
                "driver its credentials through the platform: a role, spark.kubernetes.driver.secretKeyRef.*, "
                "or Hadoop credential providers", master, ", ".join(withheld),
            )
        return env

    def execute(self, context):
        # The Spark connection is read before anything is planned: a wrong one fails the task at once, and
        # on_kill knows which kind of job it stops.
        self._connect_mode = BaseHook.get_connection(self._conn_id).conn_type == SparkConnectHook.conn_type
        started = time.monotonic()
        seq, runtime = self.batch(context)
        if self._connect_mode:
            planned_s = time.monotonic() - started
            report = self.execute_connect(context, SparkConnectHook(self._conn_id).get_connection_url(), seq, runtime)
            if self.plans:  # the plan's share of the task, beside the job's own stages
                report["seconds"]["plan"] = round(planned_s, 2)
            return report
        self.application_args = [*(self.application_args or []), "--batch", str(seq)]
        self.env_vars = self.submitted_env()
        return super().execute(context)

    def batch(self, context) -> tuple[int, PipelineRuntime | None]:
        """The run's batch: planned here (with the runtime that planned it) when this task plans, else the
        plan task's."""
        steps = BatchSteps(self.deployed, self.task_id, self.task_id if self.plans else PLAN_TASK_ID)
        if not self.plans:
            return steps.planned_seq(context), None
        planned, runtime = steps.plan(context, self.dag)
        return planned["batch_seq"], runtime

    def spark_kafka(self) -> KafkaCluster | None:
        """The Kafka cluster as the spark task's own connection names it (rendered into its environment):
        its principal may be a writer's, not the plan and commit tasks' (docs/security.md). In Spark Connect
        mode this process is the driver, and the server's Python workers take the same user from the
        job's options (its password from their own environment). None: the environment names none."""
        env = self.env_vars or {}
        if not env.get(KAFKA_CONFIG_ENV) and not env.get(KAFKA_BOOTSTRAP_VAR):
            return None
        config = json.loads(env.get(KAFKA_CONFIG_ENV) or "{}")
        config.setdefault("bootstrap.servers", env.get(KAFKA_BOOTSTRAP_VAR))
        return cluster_from_extra(f"the Kafka connection of task {self.task_id}", config)

    def execute_connect(self, context, connection_url: str, seq: int, runtime: PipelineRuntime | None) -> dict[str, Any]:
        ignored = sorted(set(self.conf or {}) - set(submit_defaults()))
        if ignored:
            log.warning("spark_conf %s not applied: on a Spark Connect server, Spark settings are the server's "
                        "(set them where it starts)", ", ".join(ignored))
        runtime = runtime or task_runtime(context, self.deployed)
        kafka = self.spark_kafka()
        if kafka is not None:
            runtime = PipelineRuntime(runtime.spec, replace(runtime.deployment, kafka=kafka), identity=runtime.identity)
        self._connect_job = ConnectBatchJob(connection_url, runtime, seq, self.py_files.split(","))
        with faults.armed_for_job((context.get("params") or {}).get(faults.RUN_PARAM)):
            result = self._connect_job.run()
        report = result.to_dict(runtime.spec.name)
        log.info("batch job done on the Spark Connect server %s: %s", self._conn_id, json.dumps(report))
        return report

    def on_kill(self) -> None:
        # Spark Connect: Airflow kills the process after on_kill, so the job's queries are stopped here
        # (and the job raises JobStopped in the task's thread, this being its SIGTERM handler).
        if self._connect_job is not None:
            self._connect_job.interrupt()
        elif not self._connect_mode:
            super().on_kill()
