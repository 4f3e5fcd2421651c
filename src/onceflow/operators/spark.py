"""The spark task: the Spark provider's SparkSubmitOperator, with one change.

Its environment is rendered from the pipeline's connections at run time; a
field the connection leaves empty (an S3 connection without keys, meaning the
worker's own credential chain) must leave the worker's variable alone rather
than set it to "" and hide the worker's own setting.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator


def set_env_only(env: dict[str, Any] | None) -> dict[str, Any]:
    """``env`` without its empty values."""
    return {k: v for k, v in (env or {}).items() if v not in ("", None)}


class OnceflowSparkSubmitOperator(SparkSubmitOperator):
    def execute(self, context):
        self.env_vars = set_env_only(self.env_vars)
        return super().execute(context)
