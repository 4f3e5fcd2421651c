"""What onceflow's tasks import when they run, imported once by each Airflow process that loads plugins.

Airflow's LocalExecutor forks its workers from the scheduler after loading the plugins, and each
task process from a worker (``os.fork``, no new interpreter): a module the scheduler imported
costs a task nothing. Without this plugin, every plan, commit and rollback task imports the
protocol, the Kafka client, pyarrow, pyiceberg and the built-in sink kinds again, on the path
from its trigger to its batch's commit. Executors that start a fresh interpreter per task
(Celery's, Kubernetes') import them all in each task when it loads the plugins, some of them a
task would not need (pyiceberg, for a pipeline without tables).

Nothing is imported that opens a connection or starts a thread: forking after it stays safe.
Spark's client stays out: only the spark task needs it, and its gRPC is not fork-safe.
"""

from __future__ import annotations

import importlib

from airflow.plugins_manager import AirflowPlugin

# The modules a task reaches from onceflow.airflow.operators.steps.task_runtime to its sinks' commit.
TASK_MODULES = (
    "onceflow.airflow.operators.batch",
    "onceflow.airflow.operators.steps",
    "onceflow.airflow.deployed",
    "onceflow.airflow.assets",
    "onceflow.airflow.metrics",
    "onceflow.airflow.hooks.kafka",
    "onceflow.airflow.hooks.s3",
    "onceflow.airflow.hooks.iceberg",
    "onceflow.pipeline.runtime",
    "onceflow.core.coordinator",
    "onceflow.core.lag",
    "onceflow.sinks.files.participant",
    "onceflow.sinks.kafka.participant",
    "onceflow.sinks.iceberg.participant",
    # imported inside the functions that use them, so a process that never commits does not pay for them
    "confluent_kafka.admin",
    "pyiceberg.catalog",
    "pyiceberg.catalog.rest",
    "pyiceberg.catalog.sql",
    "pyiceberg.table",
    "pyiceberg.io.pyarrow",
    "boto3",
)


def import_task_modules() -> None:
    for module in TASK_MODULES:
        importlib.import_module(module)


class TaskImportsPlugin(AirflowPlugin):
    """Registers nothing; loading it imports :data:`TASK_MODULES` (see the module's docstring)."""

    name = "onceflow_task_imports"

    @classmethod
    def on_load(cls, *args, **kwargs) -> None:
        import_task_modules()
