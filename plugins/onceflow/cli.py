"""The ``onceflow`` command.

    onceflow services up [--broker noida|tansu]   start the embedded stack
    onceflow services down                        stop it
    onceflow services status [--json]             what runs, where
    onceflow demo [--warehouse URI]               the end-to-end demo through Airflow
    onceflow status --pipeline P [--json]         batches, newest first
    onceflow audit --pipeline P [--json]          count every input record in every output
    onceflow chaos --batches N --seed S [--broker B|all] [--warehouse file|s3|all] [--json]
                                                  faulted batches through Airflow, then an audit

status and audit find the deployment in the environment: ONCEFLOW_WAREHOUSE
(or --warehouse), and Kafka/S3 as `onceflow services` describes.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import settings
from .services.kafka_broker import BROKERS
from .services.process import ServiceError
from .services.stack import EmbeddedStack


def _services(args: argparse.Namespace) -> int:
    stack = EmbeddedStack(settings.onceflow_home())
    if args.action == "up":
        info = stack.up(broker=args.broker)
        print(f"kafka ({info.kafka.name}): {info.kafka.bootstrap}")
        print(f"s3 (moto_server):  {info.s3.endpoint_url}")
        print(f"state and logs:    {stack.home}")
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
    from .demo import run_demo

    return run_demo(broker=args.broker, warehouse=args.warehouse, keep_running=args.keep_running)


def _runtime(args: argparse.Namespace):
    from .pipelines import get_pipeline
    from .runtime import Deployment, PipelineRuntime

    return PipelineRuntime(get_pipeline(args.pipeline), Deployment.from_environment(args.warehouse), identity="onceflow-cli")


def _status(args: argparse.Namespace) -> int:
    from .status import batch_rows, format_rows

    rows = batch_rows(_runtime(args).coordinator, limit=args.limit)
    print(json.dumps(rows, indent=2) if args.json else format_rows(rows))
    return 0


def _audit(args: argparse.Namespace) -> int:
    from .audit.clickstream_audit import audit_clickstream

    if args.pipeline != "clickstream":
        raise settings.ConfigurationError(
            f"no audit is defined for pipeline {args.pipeline!r}: onceflow audit knows the clickstream example"
        )
    runtime = _runtime(args)
    broker = settings.kafka_broker()
    from .services.kafka_broker import HIDES_ABORTED_RECORDS

    report = audit_clickstream(runtime, hides_aborted=broker.has(HIDES_ABORTED_RECORDS))
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.summary())
    return 0 if report.ok else 1


def _chaos(args: argparse.Namespace) -> int:
    from .chaos.figures import combined
    from .chaos.runner import WAREHOUSES, run_matrix

    brokers = BROKERS if args.broker == "all" else (args.broker,)
    warehouses = WAREHOUSES if args.warehouse == "all" else (args.warehouse,)
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if args.json else (lambda text: print(text, flush=True))
    results = run_matrix(args.batches, args.seed, brokers, warehouses, say=say,
                         records_per_partition=args.records_per_partition)
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
    from .chaos.figures import totals
    from .chaos.report import check, load_runs, markdown

    runs = load_runs(args.files)
    verdict = check(runs)
    if args.json:
        print(json.dumps({**totals(runs), "bar_met": verdict.met, "shortfalls": list(verdict.shortfalls)}, indent=2))
    else:
        print(markdown(runs))
        print("\n" + ("The long run's bar is met." if verdict.met else
                      "Short of the long run's bar:\n" + "\n".join(f"- {s}" for s in verdict.shortfalls)))
    return 0 if all(run["ok"] for run in runs) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onceflow", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    services = sub.add_parser("services", help="start, stop or inspect the embedded stack")
    services.add_argument("action", choices=["up", "down", "status"])
    services.add_argument("--broker", choices=BROKERS, default="noida", help="embedded Kafka broker (default: noida)")
    services.add_argument("--json", action="store_true", help="status as JSON")
    services.set_defaults(func=_services)

    demo = sub.add_parser("demo", help="run the demo end to end on the embedded stack")
    demo.add_argument("--broker", choices=BROKERS, default="noida")
    demo.add_argument("--keep-running", action="store_true", help="leave the stack up afterwards")
    demo.add_argument("--warehouse", help="where outputs and the ledger go (default: a local directory; "
                      "s3://bucket/prefix uses the embedded S3 endpoint)")
    demo.set_defaults(func=_demo)

    chaos = sub.add_parser("chaos", help="faulted batches of the example pipeline through Airflow, then an audit")
    chaos.add_argument("--batches", type=int, required=True, help="faulted batches in all (split over the combinations)")
    chaos.add_argument("--seed", type=int, required=True, help="the same seed asks for the same faults in the same order")
    chaos.add_argument("--broker", choices=[*BROKERS, "all"], default="noida")
    chaos.add_argument("--warehouse", choices=["file", "s3", "all"], default="file",
                       help="file: a local directory; s3: the embedded S3 behind a fault-injecting proxy")
    chaos.add_argument("--records-per-partition", type=int, default=100, help="input records per partition and batch")
    chaos.add_argument("--json", action="store_true", help="figures as JSON on stdout (progress on stderr)")
    chaos.set_defaults(func=_chaos)

    report = sub.add_parser("chaos-report", help="add up saved chaos runs (their --json) and check them against "
                            "the long run's bar")
    report.add_argument("files", nargs="+", help="JSON files printed by 'onceflow chaos --json'")
    report.add_argument("--json", action="store_true")
    report.set_defaults(func=_chaos_report)

    for name, func, text in (("status", _status, "batches of a pipeline, newest first"),
                             ("audit", _audit, "check every output against the input (exit 0 only when exactly once)")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--pipeline", required=True)
        cmd.add_argument("--warehouse", help="default: $ONCEFLOW_WAREHOUSE")
        cmd.add_argument("--json", action="store_true")
        if name == "status":
            cmd.add_argument("--limit", type=int, default=20, help="newest N batches (default 20)")
        cmd.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ServiceError, settings.ConfigurationError) as exc:
        print(f"onceflow: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
