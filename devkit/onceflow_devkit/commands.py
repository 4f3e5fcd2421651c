"""The dev kit's ``onceflow`` commands (entry point group ``onceflow.commands``).

    onceflow services up [--broker B] [--secure]  start the embedded stack; writes <home>/stack.env
    onceflow services down                        stop it
    onceflow services status [--json]             what runs, where
    onceflow demo [--warehouse URI]               the end-to-end demo through Airflow
    onceflow oracle-audit --pipeline clickstream  count every input record in every output, by an oracle
                                                  independent of the transform (``onceflow audit`` replays it)
    onceflow chaos --batches N --seed S [--broker B|all] [--warehouse file|s3|all] [--secure] [--kinds K,...] [--json]
    onceflow chaos-report FILE...                 saved chaos runs added up and checked against the bar

The library's own commands (``onceflow status``) read the deployment from the
environment only: ``set -a; . .onceflow/stack.env; set +a`` points them at
the embedded stack.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from onceflow.ops.cli import add_pipeline_arguments, runtime_from_args
from onceflow_devkit.chaos.figures import DEFAULT_RECORDS_PER_PARTITION
from onceflow_devkit.chaos.schedule import ALL_KINDS, KNOWN_KINDS, OPT_IN_KINDS
from onceflow_devkit.services.kafka_broker import BROKERS, CLUSTER, COMPATIBLE, DEFAULT_BROKER, STACK_BROKERS
from onceflow_devkit.services.kafka_security import USERS, Security
from onceflow_devkit.services.stack import EmbeddedStack, onceflow_home


def _services(args: argparse.Namespace) -> int:
    stack = EmbeddedStack(onceflow_home())
    if args.action == "up":
        info = stack.up(broker=args.broker, secure=args.secure)
        print(f"kafka ({info.kafka.name}{', secured' if info.security else ''}): {info.kafka.bootstrap}")
        if info.security:
            security = Security(info.security)
            print(f"kafka users:       {', '.join(USERS)} (SCRAM-SHA-512; passwords in {security.directory}/users.json)")
            print(f"kafka's CA:        {security.ca_file}")
            print(f"admin for tools:   kafka-acls.sh --command-config {security.admin_properties}")
        print(f"s3 (moto_server):  {info.s3.endpoint_url}")
        print(f"state and logs:    {stack.home}")
        print(f"client settings:   set -a; . {stack.env_file}; set +a")
    elif args.action == "down":
        stopped = stack.down()
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    else:
        rows = stack.status()
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for row in rows:
                state = f"running (pid {row['pid']}, port {row['port']})" if row["pid"] else "stopped"
                print(f"{row['service']:<6} {state}  log: {row['log']}")
        return 0 if all(r["pid"] for r in rows) else 3
    return 0


def _demo(args: argparse.Namespace) -> int:
    from onceflow_devkit.demo import run_demo, stop_demo

    if args.stop:
        return stop_demo()
    return run_demo(broker=args.broker, warehouse=args.warehouse, keep_running=args.keep_running)


def _audit(args: argparse.Namespace) -> int:
    from onceflow.config.settings import ConfigurationError
    from onceflow_devkit.audit.clickstream_audit import audit_clickstream
    from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS
    from onceflow_devkit.services.stack import environment_broker

    if args.pipeline != "clickstream":
        raise ConfigurationError(
            f"no oracle is defined for pipeline {args.pipeline!r}: onceflow oracle-audit knows the clickstream "
            f"example; `onceflow audit` replays any pipeline"
        )
    runtime = runtime_from_args(args)
    broker = environment_broker()  # the runtime's cluster, known by name when it is the embedded one
    report = audit_clickstream(runtime, hides_aborted=broker.has(HIDES_ABORTED_RECORDS))
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.summary())
    return 0 if report.ok else 1


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(KNOWN_KINDS))
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"unknown fault kinds {unknown or text!r}; known: {', '.join(KNOWN_KINDS)}")
    return kinds


def _chaos(args: argparse.Namespace) -> int:
    from onceflow_devkit.chaos.figures import combined
    from onceflow_devkit.chaos.runner import WAREHOUSES, run_matrix

    brokers = (CLUSTER, *COMPATIBLE) if args.broker == "all" else (args.broker,)
    warehouses = WAREHOUSES if args.warehouse == "all" else (args.warehouse,)
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if args.json else (lambda text: print(text, flush=True))
    results = run_matrix(args.batches, args.seed, brokers, warehouses, say=say,
                         records_per_partition=args.records_per_partition, mode=args.mode, spark=args.spark,
                         executor=args.executor, kinds=args.kinds, postgres=args.postgres, secure=args.secure,
                         transaction_timeout=args.transaction_timeout_ms, records_per_split=args.records_per_split,
                         plan_in_spark_task=args.plan_in_spark_task)
    total = combined(results)
    if args.json:
        print(json.dumps(total, indent=2))
    else:
        print(f"[chaos]   all: {'OK' if total['ok'] else 'FAILED'} — {total['faulted_batches']} faulted batches of "
              f"{total['batches_run']}, faults {total['faults_injected']}, {total['batches_aborted']} aborted, "
              f"{total['batches_recovered']} recovered, duplicates {total['duplicates']}, missing {total['missing']}, "
              f"{total['wall_time_s']:.0f} s")
    return 0 if total["ok"] else 1


def _chaos_report(args: argparse.Namespace) -> int:
    from onceflow_devkit.chaos.figures import totals
    from onceflow_devkit.chaos.report import BARS, check, load_runs, markdown

    runs = load_runs(args.files)
    verdicts = {bar.name: check(runs, bar) for bar in BARS}
    if args.json:
        print(json.dumps({**totals(runs), "bars": {name: {"met": v.met, "shortfalls": list(v.shortfalls)}
                                                   for name, v in verdicts.items()}}, indent=2))
    else:
        print(markdown(runs))
        if args.update:
            from onceflow_devkit import doc_blocks

            doc_blocks.write(Path(args.update), "chaos-report", markdown(runs))
        for name, verdict in verdicts.items():
            print(f"\n{name}: " + ("the bar is met." if verdict.met else
                                   "short of the bar:\n" + "\n".join(f"- {s}" for s in verdict.shortfalls)))
    return 0 if all(run["ok"] for run in runs) else 1


def add_commands(sub) -> None:
    services = sub.add_parser("services", help="start, stop or inspect the embedded stack (dev kit)")
    services.add_argument("action", choices=["up", "down", "status"])
    services.add_argument("--broker", choices=STACK_BROKERS, default=DEFAULT_BROKER,
                          help=f"Kafka broker (default: {DEFAULT_BROKER}, Apache Kafka 4.x; {CLUSTER}: three nodes of "
                          "it; noida and tansu are Kafka-compatible brokers)")
    services.add_argument("--secure", action="store_true",
                          help="Apache Kafka on SASL_SSL (SCRAM-SHA-512) with the ACL authorizer: no ACL, no access; "
                          "stack.env connects as the Airflow side's user (grant its ACLs: onceflow acls)")
    services.add_argument("--json", action="store_true", help="status as JSON")
    services.set_defaults(func=_services)

    demo = sub.add_parser("demo", help="run the demo end to end on the embedded stack (dev kit)")
    demo.add_argument("--broker", choices=BROKERS, default=DEFAULT_BROKER)
    demo.add_argument("--keep-running", action="store_true",
                      help="leave the stack and Airflow up afterwards, and print the onceflow page's URL")
    demo.add_argument("--stop", action="store_true", help="stop what --keep-running left up")
    demo.add_argument("--warehouse", help="where outputs and the ledger go (default: a local directory; "
                      "s3://bucket/prefix uses the embedded S3 endpoint)")
    demo.set_defaults(func=_demo)

    audit = sub.add_parser("oracle-audit", help="count every input record in every output of the clickstream "
                           "example, classified by an oracle independent of its transform; exit 0 only when "
                           "exactly once (dev kit)")
    add_pipeline_arguments(audit)
    audit.set_defaults(func=_audit)

    chaos = sub.add_parser("chaos", help="faulted batches of the example pipeline through Airflow, then an audit (dev kit)")
    chaos.add_argument("--batches", type=int, required=True, help="faulted batches in all (split over the combinations)")
    chaos.add_argument("--seed", type=int, required=True, help="the same seed asks for the same faults in the same order")
    chaos.add_argument("--broker", choices=[*STACK_BROKERS, "all"], default=DEFAULT_BROKER)
    chaos.add_argument("--warehouse", choices=["file", "s3", "all"], default="file",
                       help="file: a local directory; s3: the embedded S3 behind a fault-injecting proxy")
    chaos.add_argument("--records-per-partition", type=int, default=DEFAULT_RECORDS_PER_PARTITION,
                       help="input records per partition and batch")
    chaos.add_argument("--mode", choices=["offsets", "backfill"], default="offsets",
                       help="offsets: the clickstream DAG, run after run; backfill: faulted runs of the hourly interval "
                       "pipeline, one hour each, then Airflow backfills of every hour, three at a time")
    chaos.add_argument("--spark", choices=["submit", "connect"], default="submit",
                       help="submit: spark-submit per batch; connect: the spark tasks are clients of one Spark Connect "
                       "server, which the run also kills and restarts")
    chaos.add_argument("--executor", choices=["local", "celery"], default="local",
                       help="Airflow's executor: local (LocalExecutor), or celery (two Celery workers, a Redis broker)")
    chaos.add_argument("--postgres", action="store_true",
                       help="the pipeline also writes each valid event as a row of a PostgreSQL table (the kind of "
                       "examples/postgres_sink), on a server of its own that the PostgreSQL fault kinds crash")
    chaos.add_argument("--secure", action="store_true",
                       help="Apache Kafka on SASL_SSL (SCRAM-SHA-512) with the ACL authorizer, as `services up --secure`: "
                       "Airflow and Spark connect as their own principals, granted the ACLs `onceflow acls` prints")
    chaos.add_argument("--transaction-timeout-ms", type=int,
                       help="the Kafka outputs' transaction timeout (default: 30 s on the cluster, 120 s elsewhere); the "
                       "spark task's timeout is half of it, which a loaded machine's first batch of a session may need")
    chaos.add_argument("--records-per-split", type=int,
                       help="the pipeline's records_per_split: each output of a batch in one split per this many input "
                       "records, at most its sink's splits (default: every sink's splits)")
    chaos.add_argument("--plan-in-spark-task", action="store_true",
                       help="the DAG without a plan task: its spark task plans each batch before its job "
                       "(pipeline_dag(plan_in_spark_task=True))")
    chaos.add_argument("--kinds", type=_kinds, help="only these fault kinds, comma-separated (default: every kind the "
                       f"options allow): {', '.join(ALL_KINDS)}; and, asked for by name only, {', '.join(OPT_IN_KINDS)} "
                       "(spark-submit, offsets mode: the first runs, up to 10, each freeze a spark task that runs "
                       "again 16 batches later; run at least 18 batches, 30 for ten)")
    chaos.add_argument("--json", action="store_true", help="figures as JSON on stdout (progress on stderr)")
    chaos.set_defaults(func=_chaos)

    report = sub.add_parser("chaos-report", help="add up saved chaos runs (their --json) and check them against "
                            "the long run's bar (dev kit)")
    report.add_argument("files", nargs="+", help="JSON files printed by 'onceflow chaos --json'")
    report.add_argument("--json", action="store_true")
    report.add_argument("--update", metavar="PAGE", help="also write the figures into PAGE's chaos-report block "
                        "(make chaos-report: docs/chaos.md)")
    report.set_defaults(func=_chaos_report)
