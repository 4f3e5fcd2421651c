"""How a batch's cost grows: with its records, with its input's partitions, with the ledger's length.

    .venv/bin/python benchmarks/growth.py [--records 1000 10000 100000 1000000] [--partitions 4 16 64]
        [--ledger 10 100 1000 10000] [--repeat 3] [--connect] [--plot benchmarks/growth.png]

Uses the broker ONCEFLOW_KAFKA_BOOTSTRAP names (``onceflow services up``, then
``set -a; . .onceflow/stack.env; set +a``) and one Spark session (local[2], or with
``--connect`` a client of a Spark Connect server the script starts). Every point is
the clickstream job of ``spark_job.py`` (three outputs: Parquet files, two Kafka
topics, 4 splits each) on a fresh pipeline with a local warehouse, timed in its
three stages: plan (``plan_next``: recovery of the previous batch, the input's
offsets, the plan written), job (``run_batch``: the read, the transform, every
output pre-committed and voted) and commit (``coordinator.commit``), each started on
an idle machine. Three series:

- records: batches of N click events from 4 partitions, beside the plain job
  (``spark_job.run_plain``) on the same ranges;
- partitions: 100,000 events from P partitions, beside the plain job;
- ledger: one pipeline whose ledger already holds L committed batches (written
  as the coordinator writes them, between the timed batches), a 1,000-event batch
  planned and committed on top, and the onceflow page's newest page
  (``batch_page``) read from that ledger.

Prints each point as it goes, then each series' medians as a table with how
each stage grows at the top of its range (the slope of log(seconds) against
log(x) over the last step: flat, sublinear, linear or worse), and draws the
three series as log-log panels into ``--plot``.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

from plots import draw_growth, growth_shape  # noqa: E402 (benchmarks/ is the script's directory)
from quiet import wait_for_quiet  # noqa: E402
from spark_job import (job_spec, kafka_targets, open_session, plan_ranges, produce_events,  # noqa: E402
                       run_and_commit, run_plain)

STAGES = ("plan", "job", "commit")
OUTPUT_PARTITIONS = 4
SPLITS = 4
LEDGER_BATCH = 1_000
PARTITIONS_BATCH = 100_000


def timed_batch(spark, runtime) -> tuple[dict[str, float], object]:
    """Plan, run and commit the pipeline's next batch (driver); the seconds of each stage and the plan."""
    wait_for_quiet()
    t0 = time.perf_counter()
    with runtime.offset_source() as source:
        plan = runtime.coordinator.plan_next(source, runtime.plan_config(), run_id=f"growth-{uuid.uuid4().hex[:8]}")
    plan_s = time.perf_counter() - t0
    _, job_s, commit_s = run_and_commit(spark, runtime, plan)
    runtime.after_commit(plan)
    return {"plan": plan_s, "job": job_s, "commit": commit_s, "total": plan_s + job_s + commit_s}, plan


def fill_ledger(ledger, template, upto: int) -> None:
    """Committed batches after ``template`` (the latest plan) up to ``upto``, each reading nothing
    from where ``template`` ended, written record by record as the coordinator writes them."""
    from onceflow.core.ledger.ledger import BATCH_EFFECT
    from onceflow.core.ledger.records import Decision, DecisionOutcome, DoneMarker, Head
    from onceflow.core.participant import Vote

    ranges = tuple(dataclasses.replace(r, start=r.end) for r in template.ranges)

    def committed(seq: int) -> None:
        ledger.create_plan(dataclasses.replace(template, batch_seq=seq, ranges=ranges, run_id=f"fill-{seq}"))
        ledger.claim_attempt(seq, "growth", seq)
        votes = {s.name: Vote(s.name, seq, 1, {}, 0) for s in template.sinks}
        for vote in votes.values():
            ledger.create_vote(vote, seq)
        ledger.create_decision(Decision(seq, DecisionOutcome.COMMIT, 1, votes, "growth", seq, "all votes valid"))
        for name in (*votes, BATCH_EFFECT):
            ledger.create_done(DoneMarker(seq, name, DecisionOutcome.COMMIT, "done", "growth", seq))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(committed, range(template.batch_seq + 1, upto + 1)))
    ledger.write_head(Head(latest_seq=upto, last_committed_seq=upto))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--partitions", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--ledger", type=int, nargs="+", default=[10, 100, 1_000, 10_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--connect", action="store_true", help="run in a Spark Connect server's session (local[2])")
    parser.add_argument("--plot", type=Path, default=None, help="draw the three series into this PNG")
    args = parser.parse_args(argv)

    from onceflow.airflow.ui.overview import PAGE_SIZE, batch_page
    from onceflow.kafka.admin import delete_topics, ensure_topics
    from onceflow.pipeline.runtime import Deployment, PipelineRuntime

    from onceflow_devkit.services.stack import environment_broker

    broker = environment_broker()
    config = broker.config()
    run_tag = uuid.uuid4().hex[:6]
    work = Path(tempfile.mkdtemp(prefix="onceflow-bench-growth-"))
    topics: list[str] = []

    def fresh(name: str, input_topic: str):
        spec = job_spec(f"{run_tag}-{name}", input_topic, SPLITS)
        ensure_topics(config, kafka_targets(spec), partitions=OUTPUT_PARTITIONS)
        topics.extend(kafka_targets(spec))
        return PipelineRuntime(spec, Deployment(f"file://{work / name}", broker))

    def input_of(name: str, events: int, partitions: int) -> str:
        topic = f"growth-{run_tag}-{name}"
        ensure_topics(config, [topic], partitions=partitions)
        topics.append(topic)
        if events:
            produce_events(config, topic, events, partitions)
        return topic

    def against_plain(name: str, events: int, partitions: int) -> dict[str, float]:
        """Medians of ``--repeat`` onceflow batches and plain jobs over the same ranges, alternating."""
        topic = input_of(name, events, partitions)
        runs: list[dict[str, float]] = []
        for i in range(args.repeat):
            runtime = fresh(f"{name}-o{i}", topic)
            plain_spec = fresh(f"{name}-p{i}", topic).spec
            for side in ("onceflow", "plain") if i % 2 == 0 else ("plain", "onceflow"):
                if side == "onceflow":
                    seconds, plan = timed_batch(spark, runtime)
                else:
                    ranges = plan_ranges(plain_spec, broker, work / f"{name}-ranges-{i}")  # what onceflow reads
                    wait_for_quiet()
                    t0 = time.perf_counter()
                    count, _ = run_plain(spark, plain_spec, broker, ranges, config, work / f"{name}-plain-{i}", SPLITS)
                    plain_s = time.perf_counter() - t0
                    if count != events:
                        raise RuntimeError(f"plain job read {count} events, expected {events}")
            if plan.records != events:
                raise RuntimeError(f"onceflow batch read {plan.records} events, expected {events}")
            runs.append({**seconds, "plain": plain_s})
            print(f"  {name} repeat {i}: " + ", ".join(f"{k} {v:.2f} s" for k, v in runs[-1].items()), flush=True)
        delete_topics(config, topics)
        topics.clear()
        return {k: statistics.median(r[k] for r in runs) for k in runs[0]}

    spark, server_process = open_session(job_spec("registration", "growth-registration", SPLITS), work, args.connect)
    by_records: dict[int, dict[str, float]] = {}
    by_partitions: dict[int, dict[str, float]] = {}
    by_ledger: dict[int, dict[str, float]] = {}
    try:
        print(f"# broker {broker.name}, spark {'connect' if args.connect else 'local[2]'}, repeat {args.repeat}", flush=True)
        timed_batch(spark, fresh("warm", input_of("warm", 5_000, 4)))  # untimed: JVM paths, Python workers
        delete_topics(config, topics)
        topics.clear()

        for records in args.records:
            by_records[records] = against_plain(f"r{records}", records, 4)
        for partitions in args.partitions:
            by_partitions[partitions] = against_plain(f"p{partitions}", PARTITIONS_BATCH, partitions)

        topic = input_of("ledger", 0, 4)
        runtime = fresh("ledger", topic)
        reader = SimpleNamespace(reader=runtime.coordinator, spec=runtime.spec)
        produce_events(config, topic, LEDGER_BATCH, 4)
        _, plan = timed_batch(spark, runtime)  # batch 1, untimed: the template of the filled batches
        for length in args.ledger:
            runs, pages = [], []
            for i in range(args.repeat):
                fill_ledger(runtime.coordinator.ledger, plan, length + i)
                produce_events(config, topic, LEDGER_BATCH, 4)
                seconds, plan = timed_batch(spark, runtime)
                started = time.perf_counter()
                batch_page(reader, limit=PAGE_SIZE)
                pages.append(time.perf_counter() - started)
                runs.append(seconds)
            by_ledger[length] = {**{k: statistics.median(r[k] for r in runs) for k in runs[0]},
                                 "page": statistics.median(pages)}
            print(f"  ledger of {length}: " + ", ".join(f"{k} {v:.3f} s" for k, v in by_ledger[length].items()), flush=True)
    finally:
        spark.stop()
        if server_process is not None:
            server_process.stop(grace=5)
        delete_topics(config, topics)
        shutil.rmtree(work, ignore_errors=True)

    def table(title: str, series: dict[int, dict[str, float]], columns: tuple[str, ...]) -> None:
        xs = list(series)
        print(f"\n{title}\n\n| {title.split(' ')[0]} | " + " | ".join(f"{c} s" for c in columns)
              + (" | onceflow / plain |" if "plain" in columns else " |"))
        print("| --- " * (len(columns) + 1 + ("plain" in columns)) + "|")
        for x, row in series.items():
            ratio = f" | {row['total'] / row['plain']:.2f} |" if "plain" in columns else " |"
            print(f"| {x:,} | " + " | ".join(f"{row[c]:.3f}" for c in columns) + ratio)
        print("| grows | " + " | ".join(growth_shape(xs, [series[x][c] for x in xs]) for c in columns)
              + (" | |" if "plain" in columns else " |"))

    table("records per batch (4 partitions)", by_records, (*STAGES, "total", "plain"))
    table(f"partitions ({PARTITIONS_BATCH:,} events)", by_partitions, (*STAGES, "total", "plain"))
    table(f"ledger length (batches of {LEDGER_BATCH:,} events)", by_ledger, (*STAGES, "page"))
    if args.plot:
        draw_growth(args.plot, [
            ("records per batch (4 partitions)", "records", list(by_records),
             {s: [r[s] for r in by_records.values()] for s in (*STAGES, "plain")}, "seconds"),
            (f"input partitions ({PARTITIONS_BATCH:,} events)", "partitions", list(by_partitions),
             {s: [r[s] for r in by_partitions.values()] for s in (*STAGES, "plain")}, "seconds"),
            (f"ledger length (batches of {LEDGER_BATCH:,})", "committed batches", list(by_ledger),
             {s: [r[s] for r in by_ledger.values()] for s in ("plan", "commit", "page")}, "seconds"),
        ])
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
