"""Spark driver entry point: pre-commit every output of one batch attempt.

    spark-submit --py-files onceflow.zip spark_jobs/run_batch.py \\
        --pipeline clickstream --batch 7 --attempt 1 --warehouse s3://bucket/wh \\
        [--input clicks.parquet --skip-kafka-outputs]

Call sequence (Spark driver; executors only run the data sources' writes)::

    load the PipelineSpec (registry or --spec module[:attr])
    attempt   <- --attempt      TODO(coordinator): runtime.coordinator.begin_attempt(seq)
    records   <- --input file   TODO(kafka): the Kafka range reader data source over the
                                plan's ranges (plan = runtime.coordinator.plan(seq))
    outputs   <- spec.transform(records, batch_id)   one DataFrame per sink
    per files sink:  write format("onceflow_files") -> staged Parquet + vote (record_vote)
    per kafka sink:  TODO(kafka): the Kafka sink data source -> open txns + vote

The job never commits anything: the Airflow commit task does, from the
votes. A failed job leaves staging that the rollback task deletes.

spark-submit must ship the onceflow package to executors: ``--py-files``
with a zip of ``plugins/onceflow`` (the DAG factory builds it), in local and
cluster mode alike. Settings for S3 come from ``ONCEFLOW_S3_ENDPOINT`` and
the standard ``AWS_*`` variables (executors need them too: in cluster mode
pass them as ``spark.executorEnv.*``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Sequence

from onceflow.files import layout
from onceflow.settings import ConfigurationError
from onceflow.spec import FILES, KAFKA, PipelineSpec


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="run_batch.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", required=True, help="pipeline name (onceflow.pipelines.REGISTRY)")
    parser.add_argument("--batch", required=True, type=int, help="batch sequence number (from the plan task)")
    parser.add_argument("--attempt", type=int, help="batch attempt number (until the coordinator hands it out)")
    parser.add_argument("--spec", help="module[:attr] holding the PipelineSpec, for pipelines not in the registry")
    parser.add_argument("--warehouse", default=os.environ.get("ONCEFLOW_WAREHOUSE"),
                        help="root of file outputs (default: $ONCEFLOW_WAREHOUSE)")
    parser.add_argument("--ledger-root", help="where votes are recorded (default: the warehouse)")
    parser.add_argument("--input", help="TEMPORARY: a Parquet/JSON file of Kafka records to use as the batch input")
    parser.add_argument("--input-format", default="parquet", choices=("parquet", "json"))
    parser.add_argument("--skip-kafka-outputs", action="store_true",
                        help="pre-commit file outputs only (the Kafka sink data source is not wired yet)")
    parser.add_argument("--master", help="Spark master when not run by spark-submit (e.g. local[2])")
    return parser.parse_args(argv)


def load_spec(name: str, spec_location: str | None) -> PipelineSpec:
    if spec_location is None:
        from onceflow.pipelines import get_pipeline

        return get_pipeline(name)
    module_name, _, attr = spec_location.partition(":")
    module = importlib.import_module(module_name)
    candidates = [getattr(module, attr)] if attr else list(vars(module).values())
    for spec in candidates:
        if isinstance(spec, PipelineSpec) and spec.name == name:
            return spec
    raise ConfigurationError(f"--spec {spec_location}: no PipelineSpec named {name!r} there; pass the module "
                             "that defines the spec (module or module:attribute), or omit --spec for registered pipelines")


def vote_path(ledger_root: str, pipeline: str, batch_seq: int, attempt: int, sink: str) -> str:
    """TODO(ledger): goes away when record_vote hands votes to the coordinator."""
    return layout.join(ledger_root, "_votes", pipeline, layout.batch_id(batch_seq), str(attempt), f"{sink}.json")


def storage_options(uri: str) -> dict[str, str]:
    """Writer options that let executors reach the storage; secrets stay in the environment."""
    endpoint = os.environ.get("ONCEFLOW_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    if uri.startswith(("s3://", "s3a://")) and endpoint:
        return {"s3.endpoint_url": endpoint}
    return {}


def check_args(args: argparse.Namespace, spec: PipelineSpec) -> None:
    """Everything that can be wrong before Spark starts, with the fix."""
    if args.attempt is None:
        raise ConfigurationError("--attempt is required until the coordinator hands out attempts "
                                 "(TODO(coordinator): begin_attempt)")
    if not args.warehouse:
        raise ConfigurationError("no warehouse: pass --warehouse (file:///path, s3://bucket/prefix, hdfs://...) "
                                 "or set ONCEFLOW_WAREHOUSE")
    if args.input is None:
        raise ConfigurationError("no input: the Kafka range reader is not wired yet (TODO(kafka)); "
                                 "pass --input <file of Kafka records>")
    kafka_sinks = [s.name for s in spec.sinks if s.kind == KAFKA]
    if kafka_sinks and not args.skip_kafka_outputs:
        raise ConfigurationError(f"pipeline {spec.name!r} has Kafka outputs {kafka_sinks}, and the Kafka sink data "
                                 "source is not wired yet (TODO(kafka)); pass --skip-kafka-outputs to pre-commit "
                                 "the file outputs only. Never run such a batch to COMMIT: its Kafka output would be lost")


def spark_session(master: str | None):
    if master:
        from onceflow.spark_session import local_spark

        return local_spark("onceflow-run-batch", master=master)
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()


def read_input(spark, path: str, fmt: str):
    """TODO(kafka): replace with the Kafka range reader data source over the plan's ranges."""
    return spark.read.format(fmt).load(path)


def precommit_files(df, spec: PipelineSpec, sink_name: str, args: argparse.Namespace) -> str:
    """Stage ``df`` through the onceflow_files data source; returns where the vote is."""
    from onceflow.spark.file_sink import FORMAT

    sink_uri = layout.join(args.warehouse, spec.sink(sink_name).target)
    vote_uri = vote_path(args.ledger_root or args.warehouse, spec.name, args.batch, args.attempt, sink_name)
    options = {"sink": sink_name, "path": sink_uri, "batch_seq": str(args.batch), "attempt": str(args.attempt),
               "vote_path": vote_uri, **storage_options(sink_uri)}
    df.write.format(FORMAT).mode("append").options(**options).save()
    return vote_uri


def precommit_kafka(df, spec: PipelineSpec, sink_name: str, args: argparse.Namespace) -> str:
    """TODO(kafka): write ``df`` (key, value) through the Kafka sink data source: one open
    transaction per split with the plan's derived transactional id, vote = the handles."""
    raise NotImplementedError(f"Kafka output {sink_name!r} of {spec.name!r}: the Kafka sink data source is not wired yet")


def run(args: argparse.Namespace) -> dict[str, str]:
    spec = load_spec(args.pipeline, args.spec)
    check_args(args, spec)
    spark = spark_session(args.master)
    from onceflow.spark.file_sink import register

    register(spark)
    batch_id = layout.batch_id(args.batch)
    records = read_input(spark, args.input, args.input_format).persist()  # read once, used by every output
    try:
        outputs = spec.transform_function()(records, batch_id)
        expected = {s.name for s in spec.sinks}
        if set(outputs) != expected:
            raise ConfigurationError(f"transform {spec.transform} returned outputs {sorted(outputs)}, "
                                     f"pipeline {spec.name!r} declares sinks {sorted(expected)}: make them match")
        votes = {}
        for sink in spec.sinks:
            if sink.kind == FILES:
                votes[sink.name] = precommit_files(outputs[sink.name], spec, sink.name, args)
            elif not args.skip_kafka_outputs:
                votes[sink.name] = precommit_kafka(outputs[sink.name], spec, sink.name, args)
        return votes
    finally:
        records.unpersist()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        votes = run(args)
    except ConfigurationError as exc:
        print(f"run_batch: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"pipeline": args.pipeline, "batch": args.batch, "attempt": args.attempt, "votes": votes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
