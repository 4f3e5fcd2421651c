"""The ``onceflow`` command.

    onceflow status --pipeline P [--spec M:A | --dags-folder D] [--warehouse URI] [--json]
                                                  batches, newest first
    onceflow recover --pipeline P [--batch N] [...same options]
                                                  finish a batch (default: the latest) now
    onceflow split --pipeline P --records N --reason R [--batch N] [--by WHO]
                                                  the next batch replays at most N records per
                                                  partition of an aborted batch that keeps failing
    onceflow skip --pipeline P --reason R [--batch N] [--by WHO]
                                                  quarantine an aborted batch's input records, and
                                                  let the next batch start after them
    onceflow acls --pipeline P [--spark-user U] [--airflow-user U] [--bootstrap-server B]
                                                  the Kafka ACLs the pipeline's two principals need,
                                                  as kafka-acls.sh commands (docs/security.md)
    onceflow audit --pipeline P [--batches 3-7 | --sample N] [--ignore-columns C,...]
                   [--master local[4] | --remote sc://host:15002] [...same options]
                                                  replay committed batches, compare every output
                                                  (exit 0: all equal, 1: a difference)

The deployment comes from the environment: ``ONCEFLOW_WAREHOUSE`` (or
--warehouse), Kafka and S3 as ``onceflow.config.settings`` says. The pipeline is
found in your own code (``onceflow.pipeline.discovery``). Other packages add commands
through the ``onceflow.commands`` entry point group: a callable that takes
the subparsers and adds its own (the dev kit adds services, demo, chaos,
chaos-report and oracle-audit).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import Any, Iterator

from onceflow.config.settings import ConfigurationError
from onceflow.config.deployment import Deployment
from onceflow.core.batch_view import batch_row, batch_rows, format_rows
from onceflow.core.errors import InterventionRefused
from onceflow.core.planning.interventions import is_blank
from onceflow.kafka.acls import grants, script
from onceflow.pipeline.discovery import find_pipeline
from onceflow.pipeline.runtime import PipelineRuntime
from onceflow.spark.connect import close_client, connect_mode, join_session
from onceflow.spark.local_session import local_spark
from onceflow.spark.shipping import shipped_code

COMMANDS_GROUP = "onceflow.commands"


class CommandError(Exception):
    """A command failed for a reason its message explains (exit code 2)."""


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """Where a command finds the pipeline's spec."""
    parser.add_argument("--pipeline", required=True, help="the pipeline's name (its spec's name)")
    parser.add_argument("--spec", help="module[:attribute] defining the pipeline's PipelineSpec")
    parser.add_argument("--dags-folder", help="a DAGs folder whose DAG files define it "
                        "(default: $ONCEFLOW_DAGS_FOLDER or $AIRFLOW__CORE__DAGS_FOLDER)")


def add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)
    parser.add_argument("--warehouse", help="default: $ONCEFLOW_WAREHOUSE")
    parser.add_argument("--json", action="store_true")


def runtime_from_args(args: argparse.Namespace):
    spec = find_pipeline(args.pipeline, spec=args.spec, dags_folder=args.dags_folder)
    return PipelineRuntime(spec, Deployment.from_environment(args.warehouse), identity="onceflow-cli")


def _status(args: argparse.Namespace) -> int:
    rows = batch_rows(runtime_from_args(args).reader, limit=args.limit)
    print(json.dumps(rows, indent=2) if args.json else format_rows(rows))
    return 0


def _recover(args: argparse.Namespace) -> int:
    """Finish one batch as a plan task's recovery would: redo the effects of its
    decision, or, with no decision, presume it aborted (a batch whose Spark job is
    still running is then aborted too: its run fails, nothing is lost)."""
    runtime = runtime_from_args(args)
    latest = runtime.coordinator.latest_seq()
    if latest == 0:
        raise CommandError(f"pipeline {args.pipeline!r} has no batch yet: nothing to recover")
    if args.batch is not None and args.batch > latest:
        raise CommandError(f"pipeline {args.pipeline!r} has no batch {args.batch} (latest: {latest})")
    status = runtime.coordinator.recover(args.batch)
    if status.state.value == "committed":
        runtime.after_commit(status.plan)  # idempotent: the offsets mirror and staged copies too
    row = batch_row(status)
    print(json.dumps(row, indent=2) if args.json else format_rows([row]))
    return 0


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 18) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _words(text: str) -> str:
    if is_blank(text):
        raise argparse.ArgumentTypeError("is blank: the ledger records who decided and why, in words")
    return text


def _intervene(args: argparse.Namespace) -> int:
    """Split or skip the latest batch, aborted (``onceflow.pipeline.quarantine``)."""
    from onceflow.pipeline.quarantine import skip_batch, split_batch

    runtime = runtime_from_args(args)
    seq = args.batch or runtime.coordinator.latest_seq()
    try:
        if args.command == "split":
            split_batch(runtime, seq, args.records, args.by, args.reason)
        else:
            skip_batch(runtime, seq, args.by, args.reason)
    except InterventionRefused as exc:
        raise CommandError(str(exc)) from None
    row = batch_row(runtime.coordinator.describe(seq))
    print(json.dumps(row, indent=2) if args.json else format_rows([row]) + "\nThe pipeline's next run plans the next batch "
          "accordingly (unpause its DAG if you paused it).")
    return 0


@contextmanager
def audit_session(spec, remote: str | None = None, master: str | None = None) -> Iterator[Any]:
    """A session for replaying ``spec``'s batches, with the pipeline's code shipped as its spark
    task ships it: on a Spark Connect server (``remote``: the session of that code), spark-submit's
    when this runs under it, or a local one (``master``, default local[2])."""
    from pyspark.sql import SparkSession

    code = shipped_code(spec)
    if remote:
        with connect_mode():
            spark = join_session(remote, code)
            try:
                yield spark
            finally:
                close_client(spark)
        return
    if os.environ.get("PYSPARK_GATEWAY_PORT") and not master:  # launched by spark-submit
        spark = SparkSession.builder.getOrCreate()
    else:
        spark = local_spark("onceflow-audit", master=master or "local[2]")
    for zip_path in code[1:]:  # the transform's package, for Python UDFs on executors (onceflow is installed)
        spark.sparkContext.addPyFile(zip_path)
    yield spark


def _acls(args: argparse.Namespace) -> int:
    """Print the least the pipeline's principals need on a secured Kafka (``onceflow.kafka.acls``)."""
    resources = find_pipeline(args.pipeline, spec=args.spec, dags_folder=args.dags_folder).kafka_resources()
    users = {role: user for role, user in (("spark", args.spark_user), ("airflow", args.airflow_user)) if user}
    if args.json:
        print(json.dumps([{"principal": g.principal, "operation": g.acl.operation, "resource_type": g.resource.label,
                           "name": g.name, "pattern": g.pattern, "required": g.acl.required, "why": g.acl.why}
                          for g in grants(resources, users)], indent=2))
    else:
        print(script(resources, users, args.bootstrap_server, args.command_config))
    return 0


def _audit(args: argparse.Namespace) -> int:
    """Replay committed batches from their plans and compare every output (``onceflow.ops.audit.replay``)."""
    from onceflow.ops.audit.replay import replay_audit

    from onceflow.ops.audit.replay import parse_batches

    if args.batches and args.sample is not None:
        raise CommandError("give --batches or --sample, not both")
    if args.batches:
        parse_batches(args.batches)  # before Spark starts: a typo costs no session
    runtime = runtime_from_args(args)
    ignore = [c.strip() for c in (args.ignore_columns or "").split(",") if c.strip()]
    with audit_session(runtime.spec, args.remote, args.master) as spark:
        report = replay_audit(spark, runtime, batches=args.batches, sample=args.sample, seed=args.seed,
                              ignore_columns=ignore)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.summary())
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onceflow", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="batches of a pipeline, newest first")
    add_pipeline_arguments(status)
    status.add_argument("--limit", type=_positive, default=20, help="newest N batches (default 20)")
    status.set_defaults(func=_status)
    recover = sub.add_parser("recover", help="finish a batch now: redo its decision, or presume it aborted if undecided")
    add_pipeline_arguments(recover)
    recover.add_argument("--batch", type=_positive, help="the batch's seq (default: the latest)")
    recover.set_defaults(func=_recover)
    try:
        who = getpass.getuser()
    except (OSError, KeyError):  # no login name in this environment: --by must say
        who = None
    for name, what in (("split", "the next batch replays at most --records records per partition of an aborted "
                                 "batch that keeps failing"),
                       ("skip", "copy an aborted batch's input records to the pipeline's quarantine, and let the next "
                                "batch start after them")):
        command = sub.add_parser(name, help=what)
        add_pipeline_arguments(command)
        command.add_argument("--batch", type=_positive, help="the batch's seq (default: the latest); it must be the latest, "
                             "and aborted")
        if name == "split":
            command.add_argument("--records", type=_positive, required=True, help="at most this many records per partition")
        command.add_argument("--reason", type=_words, required=True, help="why, recorded in the ledger with the batch")
        command.add_argument("--by", type=_words, default=who, required=who is None,
                             help=f"who decided, recorded with the reason (default: {who or 'none: give it'})")
        command.set_defaults(func=_intervene)
    acls = sub.add_parser("acls", help="the Kafka ACLs the pipeline's principals need (the Spark side that writes, "
                          "the Airflow side that decides), as kafka-acls.sh commands")
    add_spec_arguments(acls)
    acls.add_argument("--spark-user", help="the Spark side's Kafka user (default: onceflow-spark)")
    acls.add_argument("--airflow-user", help="the Airflow side's Kafka user (default: onceflow-airflow)")
    acls.add_argument("--bootstrap-server", default=os.environ.get("ONCEFLOW_KAFKA_BOOTSTRAP") or "BROKER:9093",
                      help="what the commands connect to (default: $ONCEFLOW_KAFKA_BOOTSTRAP)")
    acls.add_argument("--command-config", default="admin.properties",
                      help="the settings file of a principal allowed to create ACLs (default: admin.properties)")
    acls.add_argument("--json", action="store_true", help="the grants as JSON")
    acls.set_defaults(func=_acls)
    audit = sub.add_parser("audit", help="replay committed batches from their plans and compare every output "
                           "with what it holds; exit 1 on any difference")
    add_pipeline_arguments(audit)
    audit.add_argument("--batches", help="the batches to replay, e.g. 3-7,9 (default: every committed batch, and "
                       "rows of batches that never committed are looked for too)")
    audit.add_argument("--sample", type=_positive, help="replay N committed batches drawn at random")
    audit.add_argument("--seed", type=int, default=0, help="the draw of --sample (default 0)")
    audit.add_argument("--ignore-columns", help="columns the transform does not reproduce (processing times, "
                       "random ids), comma-separated")
    audit.add_argument("--master", help="Spark master of a local session (default local[2]; under spark-submit, "
                       "its session)")
    audit.add_argument("--remote", help="a Spark Connect server, sc://host:port (the pipeline's code joins the "
                       "session its spark tasks use)")
    audit.set_defaults(func=_audit)
    for entry_point in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        entry_point.load()(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CommandError, ConfigurationError) as exc:
        print(f"onceflow: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
