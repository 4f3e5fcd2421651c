"""The spark task: the Spark provider's SparkSubmitOperator, with two changes.

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
"""

from __future__ import annotations

import json
import logging
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ..iceberg.properties import public_properties, secret_properties
from ..kafka.cluster import is_secret
from ..settings import ICEBERG_CATALOGS_VAR

log = logging.getLogger(__name__)
# Environment variables that hold a secret, or half of a key pair without its secret.
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
KAFKA_CONFIG_ENV = "ONCEFLOW_KAFKA_CONFIG"


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
    if ICEBERG_CATALOGS_VAR in kept:
        catalogs = json.loads(kept[ICEBERG_CATALOGS_VAR] or "{}")
        kept[ICEBERG_CATALOGS_VAR] = json.dumps({name: public_properties(props) for name, props in catalogs.items()})
        withheld += [f"{ICEBERG_CATALOGS_VAR}[{name}][{k}]" for name, props in sorted(catalogs.items())
                     for k in sorted(secret_properties(props))]
    return kept, withheld


class OnceflowSparkSubmitOperator(SparkSubmitOperator):
    def submitted_env(self) -> dict[str, Any]:
        """The environment spark-submit gets: set values only, and no secret where it would be an argument."""
        env = set_env_only(self.env_vars)
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
        self.env_vars = self.submitted_env()
        return super().execute(context)
