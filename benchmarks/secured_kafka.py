"""What TLS and SASL cost: kafka_throughput.py and spark_job.py on a PLAINTEXT and a secured broker, in one run.

    python benchmarks/secured_kafka.py [--records N] [--rounds R] [--events E] [--repeat K] [--skip-spark] [--readme]

Starts two single nodes of the dev kit's Apache Kafka 4.4 in a temporary home,
one on PLAINTEXT and one on SASL_SSL (SCRAM-SHA-512 over TLS, the ACL
authorizer: ``onceflow services up --secure``'s node), and stops both at the
end, also on error. Then, alternating the broker round by round (the first
broker of a round alternates too):

1. ``--rounds`` rounds of kafka_throughput.py's comparisons
   (``kafka_throughput.measure_round``): onceflow's exactly-once write against
   the raw transactional producer, ``RangeReader`` against the raw
   read_committed consumer; and, before each, a fresh raw transactional
   producer's setup alone (connect, TLS handshake, SASL, InitProducerId):
   what the secured broker costs per connection, apart from what it costs
   per record.
2. ``--repeat`` rounds of spark_job.py (the clickstream job, plain against
   onceflow's, ``--events`` events), one ``--repeat 1`` run per broker and
   round, as a subprocess whose environment names the broker (its password in
   ``ONCEFLOW_KAFKA_SECRETS``, never on a command line); its last line, JSON,
   holds the figures.

On the secured broker every client connects as the dev kit's admin, a super
user: the authorizer lets a super user through before it looks at any ACL,
so the figures price TLS and SASL, not ACL checks. (The benchmark creates and
deletes its topics and picks transactional ids at random, outside the per
pipeline grants of ``onceflow acls``.)

Prints, per broker, the medians and the ratios (onceflow / raw, onceflow's job
/ the plain job), the secured / PLAINTEXT ratio of each other figure, how much
of the raw write's extra time on the secured broker is the producer's setup,
and a final JSON line. ``--readme`` writes the table into benchmarks/README.md's
``secured-kafka`` block.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from onceflow.config import settings
from onceflow_devkit import doc_blocks
from onceflow_devkit.services.kafka_broker import DEFAULT_BROKER, KafkaBroker, start_broker
from onceflow_devkit.services.kafka_security import ADMIN, MECHANISM
from onceflow_devkit.services.process import ManagedProcess, pick_port

from baseline import PRODUCER_TUNING  # benchmarks/ is the script's directory
from kafka_throughput import make_batch, measure_round, rate_rows

BROKERS = ("plaintext", "secured")
SECURED_AS = f"SASL_SSL, {MECHANISM}, as User:{ADMIN} (super user: ACL checks skipped, the figures price TLS + SASL)"
SPARK_JOB = Path(__file__).with_name("spark_job.py")
README = Path(__file__).with_name("README.md")
BLOCK = "secured-kafka"  # benchmarks/README.md's figures, written by --readme
SETUP_SAMPLES = 3  # fresh producers per round, for the median setup time
RATIO, RATE, SECONDS = "ratio", "rec/s", "s"
# Every figure reported, in order: (key, what it is, unit). Ratios are onceflow's against its baseline
# on one broker; every other figure is also divided secured / PLAINTEXT.
FIGURES = (
    ("write_raw_rec_s", "write: raw transactional producer", RATE),
    ("write_onceflow_rec_s", "write: onceflow pre-commit + commit", RATE),
    ("write_ratio", "write: onceflow / raw", RATIO),
    ("read_raw_rec_s", "read: raw read_committed consumer", RATE),
    ("read_onceflow_rec_s", "read: onceflow RangeReader, value only", RATE),
    ("read_ratio", "read: onceflow / raw", RATIO),
    ("read_all_fields_ratio", "read, all fields: onceflow / raw", RATIO),
    ("raw_write_s", "raw write, producer setup included", SECONDS),
    ("producer_setup_s", "raw producer setup (connect, TLS, SASL, InitProducerId)", SECONDS),
    ("onceflow_commit_s", "onceflow commit of a split (EndTxn, verifying read)", SECONDS),
    ("spark_plain_s", "job: plain", SECONDS),
    ("spark_onceflow_s", "job: onceflow", SECONDS),
    ("spark_ratio", "job: onceflow / plain", RATIO),
)
# kafka_throughput.rate_rows' rows whose records/s (rates) and onceflow / baseline (ratios) are figures here.
RATE_ROWS = {
    "write_raw_rec_s": "write: raw transactional producer",
    "write_onceflow_rec_s": "write: onceflow pre-commit + commit",
    "read_raw_rec_s": "read: raw read_committed consumer",
    "read_onceflow_rec_s": "read: onceflow read_range, value only",
}
RATIO_ROWS = {
    "write_ratio": "write: onceflow pre-commit + commit",
    "read_ratio": "read: onceflow read_range, value only",
    "read_all_fields_ratio": "read: onceflow vs raw keeping all fields",
}


def producer_setup_s(config: dict) -> float:
    """Seconds until a fresh raw transactional producer is ready to send: connect, TLS and SASL (on a
    secured broker), FindCoordinator, InitProducerId. The raw write of kafka_throughput pays it once, with
    the same settings (without them librdkafka waits in init_transactions)."""
    started = time.perf_counter()
    producer = Producer({**config, "transactional.id": f"setup-{uuid.uuid4().hex[:8]}", **PRODUCER_TUNING})
    producer.init_transactions(30)
    ready = time.perf_counter() - started
    producer.flush(5)
    return ready


def kafka_figures(rounds: list[dict[str, float]], setups: list[float], records: int) -> dict[str, float]:
    """One broker's medians and ratios: records/s of each side, onceflow / raw for writes and reads, and
    where the raw write's time goes (the producer's setup against the rest)."""
    rows = {name: (rate, ratio) for name, rate, ratio in rate_rows(rounds, records)}
    return {**{key: rows[row][0] for key, row in RATE_ROWS.items()},
            **{key: rows[row][1] for key, row in RATIO_ROWS.items()},
            "raw_write_s": statistics.median(r["write_raw"] for r in rounds),
            "producer_setup_s": statistics.median(setups),
            "onceflow_commit_s": statistics.median(r["commit_of"] for r in rounds)}


def spark_figures(runs: list[dict]) -> dict[str, float]:
    """One broker's spark_job runs (their JSON lines): median seconds of each side and their ratio."""
    plain = statistics.median(r["plain_s"] for r in runs)
    onceflow = statistics.median(r["onceflow_s"] for r in runs)
    return {"spark_plain_s": plain, "spark_onceflow_s": onceflow, "spark_ratio": onceflow / plain}


def secured_over_plaintext(figures: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each absolute figure (not the ratios) on the secured broker divided by the same on PLAINTEXT
    (records/s: below 1 is slower; seconds: above 1 is slower)."""
    plain, secured = figures["plaintext"], figures["secured"]
    return {key: secured[key] / plain[key] for key, _, unit in FIGURES if unit != RATIO and key in plain}


def where_the_time_goes(figures: dict[str, dict[str, float]]) -> str:
    """The raw write's extra seconds on the secured broker: how much of it is the producer's setup."""
    plain, secured = figures["plaintext"], figures["secured"]
    extra = secured["raw_write_s"] - plain["raw_write_s"]
    setup = secured["producer_setup_s"] - plain["producer_setup_s"]
    return (f"raw transactional write: {plain['raw_write_s']:.2f} s PLAINTEXT, {secured['raw_write_s']:.2f} s secured "
            f"({extra:+.2f} s); producer setup (connect, TLS, SASL, InitProducerId) {plain['producer_setup_s']:.3f} s / "
            f"{secured['producer_setup_s']:.3f} s ({setup:+.3f} s): the rest, {extra - setup:+.2f} s, "
            f"grows with the records (TLS on the stream)")


def start_brokers(home: Path) -> dict[str, KafkaBroker]:
    """The two single nodes, on ports of their own (never the usual 9092 a stack may want)."""
    brokers: dict[str, KafkaBroker] = {}
    for name in BROKERS:
        proc = ManagedProcess(f"kafka-{name}", home / name)
        brokers[name] = start_broker(DEFAULT_BROKER, proc, port=pick_port(None), die_with_parent=True,
                                     secure=name == "secured")
    return brokers


def run_spark_job(broker: KafkaBroker, home: Path, events: int, label: str) -> dict:
    """spark_job.py --repeat 1 against ``broker``, its settings and secrets in the environment only; its JSON line."""
    env = {k: v for k, v in os.environ.items()
           if k not in (settings.KAFKA_BOOTSTRAP_VAR, settings.KAFKA_CONFIG_VAR, settings.KAFKA_SECRETS_VAR)}
    env.update(broker.environment())
    env["ONCEFLOW_HOME"] = str(home)  # no stack here: the job takes the broker for an external Apache Kafka
    log = home / f"spark-{label}.log"
    with open(log, "w") as stderr:
        job = subprocess.Popen([sys.executable, str(SPARK_JOB), "--events", str(events), "--repeat", "1"],
                               env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
        last = ""
        for line in job.stdout:
            print(f"  [{label}] {line.rstrip()}", flush=True)
            last = line
    if job.wait() != 0:
        tail = log.read_text()[-3000:]
        raise SystemExit(f"spark_job.py on the {label} broker exited {job.returncode}:\n{tail}")
    return json.loads(last)


def warm_up(config: dict, partitions: int, value_bytes: int, staging: str) -> None:
    """One small untimed round: a fresh node creates its transaction and offsets topics on first use
    ("Coordinator load in progress"), which the first timed round would otherwise pay."""
    measure_round(config, make_batch(1_000, value_bytes), partitions, staging)


def ordered(round_no: int) -> tuple[str, ...]:
    """The brokers in round ``round_no``'s order: each goes first every other round."""
    return BROKERS if round_no % 2 == 0 else BROKERS[::-1]


def cell(value: float, unit: str) -> str:
    if unit == SECONDS:
        return f"{value:.3f} s" if value < 1 else f"{value:.2f} s"
    return f"{value:,.0f} {unit}" if unit == RATE else f"{value:.3f}"


def table(figures: dict[str, dict[str, float]]) -> list[list[str]]:
    """Rows of (figure, PLAINTEXT, secured, secured / PLAINTEXT) for the figures measured."""
    ratios = secured_over_plaintext(figures)
    return [[label, cell(figures["plaintext"][key], unit), cell(figures["secured"][key], unit),
             f"{ratios[key]:.2f}" if key in ratios else ""]
            for key, label, unit in FIGURES if key in figures["plaintext"]]


HEADER = ["figure", "PLAINTEXT", "secured", "secured / PLAINTEXT"]


def console(rows: list[list[str]]) -> str:
    return "\n".join(f"{r[0]:56s} {r[1]:>16s} {r[2]:>16s} {r[3]:>20s}" for r in [HEADER, *rows])


def markdown(result: dict) -> str:
    """benchmarks/README.md's block: when, what and how it ran, then the table."""
    run = (f"{result['date']}, commit {result['commit']}, `{result['command']}`: {result['records']:,} records x "
           f"{result['rounds']} rounds" + (f", job of {result['events']:,} events x {result['repeat']}"
                                            if result["events"] else ""))
    rows = table(result["figures"])
    return "\n".join([f"Measured {run}; secured: {result['secured']}.", "",
                      "| " + " | ".join(HEADER) + " |", "| --- | --- | --- | --- |",
                      *("| " + " | ".join(r) + " |" for r in rows), "", result["where_the_time_goes"]])


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000, help="records per kafka_throughput round")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7, help="kafka_throughput rounds per broker")
    parser.add_argument("--events", type=int, default=1_000_000, help="click events of each spark_job run")
    parser.add_argument("--repeat", type=int, default=3, help="spark_job runs per broker")
    parser.add_argument("--skip-spark", action="store_true", help="the Kafka comparisons alone")
    parser.add_argument("--readme", action="store_true", help=f"write the figures into {README.name}'s {BLOCK} block")
    args = parser.parse_args(argv)

    home = Path(tempfile.mkdtemp(prefix="onceflow-bench-secured-"))
    try:
        brokers = start_brokers(home)
        for name, broker in brokers.items():
            print(f"# {name}: Apache Kafka 4.4 at {broker.bootstrap}" + (f", {SECURED_AS}" if name == "secured" else ""),
                  flush=True)
        print(f"# {args.records} records of {args.value_bytes} B, {args.partitions} partitions, {args.rounds} rounds; "
              + ("no Spark job" if args.skip_spark else f"spark_job {args.events} events, {args.repeat} runs") + " per broker",
              flush=True)
        batch = make_batch(args.records, args.value_bytes)
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in BROKERS}
        setups: dict[str, list[float]] = {name: [] for name in BROKERS}
        staging = home / "staging"
        staging.mkdir()
        for broker in brokers.values():
            warm_up(broker.config(), args.partitions, args.value_bytes, str(staging))
        for i in range(args.rounds):
            for name in ordered(i):
                config = brokers[name].config()
                setups[name].extend(producer_setup_s(config) for _ in range(SETUP_SAMPLES))
                rounds[name].append(measure_round(config, batch, args.partitions, str(staging)))
                print(f"round {i} {name}: write {rounds[name][-1]['write_of']:.2f} s onceflow / "
                      f"{rounds[name][-1]['write_raw']:.2f} s raw", flush=True)
        figures = {name: kafka_figures(rounds[name], setups[name], args.records) for name in BROKERS}
        if not args.skip_spark:
            runs: dict[str, list[dict]] = {name: [] for name in BROKERS}
            for i in range(args.repeat):
                for name in ordered(i):
                    runs[name].append(run_spark_job(brokers[name], home, args.events, f"{name} {i}"))
            for name in BROKERS:
                figures[name].update(spark_figures(runs[name]))
    finally:  # both, whichever started (stop is a no-op on a node that is down)
        for name in BROKERS:
            ManagedProcess(f"kafka-{name}", home / name).stop(grace=5)
        shutil.rmtree(home, ignore_errors=True)

    result = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit(),
              "command": " ".join(["benchmarks/secured_kafka.py", *(sys.argv[1:] if argv is None else argv)]),
              "records": args.records, "rounds": args.rounds, "partitions": args.partitions,
              "events": None if args.skip_spark else args.events, "repeat": None if args.skip_spark else args.repeat,
              "secured": SECURED_AS, "where_the_time_goes": where_the_time_goes(figures),
              "figures": {name: {k: round(v, 4) for k, v in f.items()} for name, f in figures.items()},
              "secured_over_plaintext": {k: round(v, 3) for k, v in secured_over_plaintext(figures).items()}}
    print(console(table(figures)))
    print(result["where_the_time_goes"])
    if args.readme:
        doc_blocks.write(README, BLOCK, markdown(result))
        print(f"# figures written to {README}'s {BLOCK} block")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
