"""Spark driver entry point: pre-commit every output of one batch.

    spark-submit --py-files onceflow.zip,my_pipelines.zip \\
        <site-packages>/onceflow/spark/submit.py \\
        --pipeline orders --batch 7 --spec my_pipelines.orders:ORDERS

The DAG factory submits this file from the installed package, the spec in
``$ONCEFLOW_SPEC_JSON`` (``onceflow.spark.shipping.SPEC_VAR``: never an argument, as its
params may hold a token); ``spark_jobs/run_batch.py`` in the repository is a thin
copy-able entry point that calls ``main``.

Run by the DAG's ``spark`` task (SparkSubmitOperator), with the deployment in
the environment: ``ONCEFLOW_WAREHOUSE``, ``ONCEFLOW_KAFKA_BOOTSTRAP`` /
``ONCEFLOW_KAFKA_CONFIG`` and, for an S3 warehouse, ``ONCEFLOW_S3_ENDPOINT``
plus the standard ``AWS_*`` variables. In cluster mode pass the same
variables to executors (``spark.executorEnv.*``); only secrets travel that
way, everything else reaches executors as data source options.

What it does (``onceflow.spark.batch_job``): claim the next attempt of the
batch (fencing older ones), read exactly the planned Kafka ranges, run the
pipeline's transform, pre-commit each output and record the votes in the
ledger. It never commits: the Airflow commit task does. Exit codes: 0 all
outputs voted; 2 configuration error (message names the setting); 3 the
batch is already decided (a zombie or late retry: nothing was written);
anything else: the job failed and the rollback task will clean up.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence

from onceflow.config.settings import ConfigurationError
from onceflow.pipeline.spec import PipelineSpec
from onceflow.config.deployment import Deployment
from onceflow.core.states import IllegalTransition
from onceflow.pipeline.discovery import spec_in_module
from onceflow.pipeline.runtime import PipelineRuntime
from onceflow.spark.batch_job import run_batch
from onceflow.spark.local_session import local_spark
from onceflow.spark.shipping import spec_from_environment


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="onceflow.spark.submit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", required=True, help="pipeline name (the spec's name)")
    parser.add_argument("--batch", required=True, type=int, help="batch sequence number (from the plan task)")
    parser.add_argument("--spec", help="module[:attr] holding the PipelineSpec (importable in the driver); "
                        "default: the spec in $ONCEFLOW_SPEC_JSON, where the DAG factory's spark task puts it")
    parser.add_argument("--warehouse", help="warehouse URI (default: $ONCEFLOW_WAREHOUSE)")
    parser.add_argument("--master", help="Spark master when not run by spark-submit (e.g. local[2])")
    return parser.parse_args(argv)


def load_spec(name: str, spec_location: str | None) -> PipelineSpec:
    if spec_location is None:
        return spec_from_environment(name)
    return spec_in_module(name, spec_location)


def spark_session(master: str | None):
    if master:
        return local_spark("onceflow-run-batch", master=master)
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        spec = load_spec(args.pipeline, args.spec)
        deployment = Deployment.from_environment(args.warehouse)
    except ConfigurationError as exc:
        print(f"onceflow.spark.submit: {exc}", file=sys.stderr)
        return 2
    spark = spark_session(args.master)
    runtime = PipelineRuntime(spec, deployment, identity=f"spark-driver:{spec.name}:{args.batch}")
    try:
        result = run_batch(spark, runtime, args.batch)
    except IllegalTransition as exc:
        print(f"onceflow.spark.submit: {exc}", file=sys.stderr)
        return 3
    print(json.dumps(result.to_dict(spec.name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
