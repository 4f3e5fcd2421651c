"""What exactly-once costs the whole clickstream job: run_batch + commit vs the same job written plainly.

    .venv/bin/python benchmarks/spark_job.py [--events 1000000] [--repeat 3] [--splits 4] [--master local[2] | --connect]
        [--plain-headers] [--plain-concurrent] [--plain-connector] [--profile DIR]

Uses the broker ONCEFLOW_KAFKA_BOOTSTRAP names (for the embedded one: ``onceflow
services up``, then ``set -a; . .onceflow/stack.env; set +a``). ``--events`` click events (5%
malformed) are produced once to a fresh input topic of ``--partitions``
partitions; then, in ONE Spark session, ``--repeat`` times, each side once
(plain first in even repeats, onceflow first in odd ones):

- plain: the same ``onceflow_kafka_range`` read of the same ranges (input cost
  equal), the same transform, ``page_minute_counts`` by ``df.write.parquet``
  (no staging) and each Kafka output by a plain, non-transactional
  confluent-kafka producer inside ``mapInArrow`` (returning counts), to fresh
  topics, one output after another. No ledger, no votes, no commit. With
  ``--plain-headers`` its Kafka records carry onceflow's headers too (same
  names, same sizes), so the ratio prices staging and transactions alone.
  With ``--plain-concurrent`` it writes its outputs at once, one driver
  thread each: what that would save a job (onceflow's still writes them in
  turn; benchmarks/README.md says why). With ``--plain-connector`` it is
  the job a user would write with Spark's own connectors instead, at least
  once: Spark's Kafka source reads the same ranges (exact
  ``startingOffsets``/``endingOffsets``, ``kafka.isolation.level=read_committed``),
  each Kafka output is written by Spark's Kafka sink (``format("kafka")``, its
  defaults), the files by ``df.write.parquet`` (local sessions only: the
  connector's jars, fetched by Maven, join the session's classpath).
- onceflow: a fresh pipeline (own name, output topics, warehouse, hence a
  fresh ledger) planned over all events, ``run_batch`` (staged files, open
  transactions, votes; one output after another) then
  ``coordinator.commit`` (promotion, EndTxn from the votes, verification).
  Timed from job start to commit done; the clean-up after commit
  (``after_commit``: mirror offsets, drop staged copies) is outside the
  timing, as it is outside the batch's latency.

With ``--connect`` both sides run as clients of a Spark Connect server
(local[2]) that the benchmark starts, in one session: the Spark Connect
mode's session, as the spark task joins it (``onceflow.spark.connect``).

An untimed warm-up of both sides (5,000 events per partition) runs first:
the first use of a Python data source in a Spark session costs about 3 s.
Each timed run starts on an idle machine (``quiet.py``: noida-db re-saves
all it stores after each write, a few CPU seconds that would land on either
side at random). Each repeat's output topics are deleted after it, the input
topic at the end. Both sides repartition every output to ``--splits`` (the
plan's sink splits).

Prints two lines per repeat: the totals, and the seconds of each stage on
both sides (the input read and cached, then each output: computing it from
the cached input and writing it, for onceflow including the pre-commit and
the vote; then onceflow's commit). Then the medians, events/s, the ratio of
the medians and the median of the per-repeat ratios (issue 5 target: both
<= 1.15), the median CPU seconds used during each side's runs by its own
processes (driver, Spark's JVM, Python workers) and by all others (the
broker and S3 on this machine), plain first, and each stage's median.

With ``--profile DIR`` each timed run is also sampled by py-spy
(``python_profile``: the driver and Spark's Python workers), its raw stacks
kept in DIR, and the medians of each side's Python CPU seconds per category
printed last. py-spy's own CPU lands on the timed runs: a profiled run's
times are not the benchmark's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path


from baseline import PRODUCER_TUNING  # noqa: E402 (benchmarks/ is the script's directory)
from python_profile import PythonProfile, categorized  # noqa: E402
from quiet import CpuMeter, wait_for_quiet  # noqa: E402


def produce_events(config: dict, topic: str, events: int, partitions: int) -> None:
    from onceflow_examples.clickstream_data import generate, produce

    produce({**config, **PRODUCER_TUNING}, topic, generate(events, seed=1), partitions)


def job_spec(tag: str, input_topic: str, splits: int):
    from onceflow_examples.clickstream import CLICKSTREAM
    from onceflow.pipeline.spec import FILES, KAFKA, SinkSpec

    return dataclasses.replace(
        CLICKSTREAM,
        name=f"bench-{tag}",
        topics=(input_topic,),
        sinks=(
            SinkSpec("page_minute_counts", FILES, f"bench-{tag}/page_minute_counts", splits=splits),
            SinkSpec("clicks_enriched", KAFKA, f"bench-enriched-{tag}", splits=splits),
            SinkSpec("clicks_dead_letter", KAFKA, f"bench-dead-{tag}", splits=splits),
        ),
        max_records_per_partition=None,
    )


def kafka_targets(spec) -> list[str]:
    return [s.target for s in spec.sinks if s.kind == "kafka"]


def plain_producer(config: dict, topic: str, headers_of: tuple[str, str] | None = None):
    """mapInArrow function (executor): produce each row's key/value, yield the count.

    ``headers_of`` (pipeline, sink): each record also carries the headers onceflow's split would
    put on it (``--plain-headers``), so that the two sides differ only in staging and transactions."""

    def produce_partition(batches):
        import pyarrow as pa
        from confluent_kafka import Producer
        from pyspark import TaskContext

        producer = Producer({**config, **PRODUCER_TUNING})
        headers = None
        if headers_of:
            from onceflow.sinks.kafka.ids import transactional_id
            from onceflow.sinks.kafka.headers import record_headers
            from onceflow.core.batch_id import BatchId

            split = TaskContext.get().partitionId()  # the fresh pipeline's first batch, as onceflow's side writes
            headers = record_headers(str(BatchId(1)), split, transactional_id(*headers_of, split))
        sent = 0
        for batch in batches:
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            for key, value in zip(keys, values):
                while True:
                    try:
                        producer.produce(topic, key=key, value=value, headers=headers)
                        break
                    except BufferError:
                        producer.poll(0.1)
            sent += batch.num_rows
        if producer.flush(120):
            raise RuntimeError(f"{topic}: records still unsent after 120 s")
        yield pa.RecordBatch.from_pydict({"sent": [sent]})

    return produce_partition


def spark_kafka_read(spark, ranges, config: dict, columns):
    """Exactly ``ranges`` through Spark's own Kafka source, read_committed, only ``columns`` (driver)."""
    start: dict[str, dict[str, int]] = {}
    end: dict[str, dict[str, int]] = {}
    for r in ranges:
        start.setdefault(r.topic, {})[str(r.partition)] = r.start
        end.setdefault(r.topic, {})[str(r.partition)] = r.end
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", config["bootstrap.servers"])
              .option("assign", json.dumps({t: [int(p) for p in parts] for t, parts in start.items()}))
              .option("startingOffsets", json.dumps(start)).option("endingOffsets", json.dumps(end))
              .option("kafka.isolation.level", "read_committed").option("includeHeaders", str("headers" in columns).lower()))
    return reader.load().select(*columns)


def run_plain(spark, spec, broker, ranges, config: dict, out_dir: Path, splits: int,
              with_headers: bool = False, concurrent: bool = False,
              connector: bool = False) -> tuple[int, dict[str, float]]:
    """The same read and transform as run_batch, written with no staging and no transactions (driver);
    ``with_headers``: Kafka records carry onceflow's headers all the same; ``concurrent``: the outputs
    are written at once, one driver thread each (otherwise one after another, as run_batch writes them);
    ``connector``: read and write Kafka with Spark's own connector instead.

    Returns the records read and the seconds of each stage, named as run_batch's ``JobResult.seconds``.
    """
    from onceflow.pipeline.runtime import Deployment
    from onceflow.spark.batch_job import read_input

    started = time.perf_counter()
    # The deployment only tells the reader where the broker is; nothing is written to its warehouse.
    if connector:
        records = spark_kafka_read(spark, ranges, config, spec.input_columns).cache()
    else:
        records = read_input(spark, spec, ranges, Deployment(f"file://{out_dir}", broker).to_option()).cache()
    count = records.count()
    seconds = {"read": time.perf_counter() - started}
    outputs = spec.transform_function()(records, "0000000001")

    def write(sink) -> float:
        started = time.perf_counter()
        frame = outputs[sink.name].repartition(splits)
        if sink.kind == "files":
            frame.write.parquet(str(out_dir / sink.name))
        elif connector:
            (frame.select("key", "value").write.format("kafka")
             .option("kafka.bootstrap.servers", config["bootstrap.servers"]).option("topic", sink.target).save())
        else:
            produce = plain_producer(config, sink.target, (spec.name, sink.name) if with_headers else None)
            sent = frame.select("key", "value").mapInArrow(produce, "sent long")
            sent.agg({"sent": "sum"}).collect()
        return time.perf_counter() - started

    if concurrent:
        from concurrent.futures import ThreadPoolExecutor

        from pyspark import inheritable_thread_target

        with ThreadPoolExecutor(max_workers=len(spec.sinks)) as pool:
            seconds.update(zip((s.name for s in spec.sinks), pool.map(inheritable_thread_target(spark)(write), spec.sinks)))
    else:
        seconds.update({sink.name: write(sink) for sink in spec.sinks})
    records.unpersist()
    return count, seconds


def planned(spec, broker, warehouse: Path, run_id: str):
    """A fresh pipeline runtime on ``warehouse`` and its next plan (driver)."""
    from onceflow.pipeline.runtime import Deployment, PipelineRuntime

    runtime = PipelineRuntime(spec, Deployment(f"file://{warehouse}", broker))
    with runtime.offset_source() as source:
        return runtime, runtime.coordinator.plan_next(source, runtime.plan_config(), run_id=run_id)


def plan_ranges(spec, broker, warehouse: Path):
    """The ranges onceflow would plan for ``spec`` (the plain side reads exactly these; its plan is never run)."""
    return planned(spec, broker, warehouse, "plain")[1].ranges


def run_onceflow(spark, spec, broker, warehouse: Path, meter: CpuMeter, expected: int | None = None) -> dict[str, float]:
    """Plan, run_batch, commit (driver); returns the seconds of the job's stages (``JobResult.seconds``),
    of the whole job ("job") and of the commit ("commit")."""
    runtime, plan = planned(spec, broker, warehouse, "once")
    if expected is not None and plan.records != expected:
        raise RuntimeError(f"onceflow plan {plan.batch_id} covers {plan.records} events, expected {expected}")
    if expected is not None:
        wait_for_quiet()
    with meter:
        result, job_s, commit_s = run_and_commit(spark, runtime, plan)
    runtime.after_commit(plan)  # mirror offsets, drop staged copies: outside a batch's latency
    return {**result.seconds, "job": job_s, "commit": commit_s}


def run_and_commit(spark, runtime, plan):
    """run_batch then coordinator.commit of a planned batch (driver); (JobResult, job s, commit s).
    The caller runs the clean-up after it (``runtime.after_commit``), untimed."""
    from onceflow.spark.batch_job import run_batch

    t0 = time.perf_counter()
    result = run_batch(spark, runtime, plan.batch_seq)
    t1 = time.perf_counter()
    status = commit_with_retries(runtime.coordinator, plan.batch_seq)
    t2 = time.perf_counter()
    if status.state.value != "committed":
        raise RuntimeError(f"batch {plan.batch_id} of {runtime.spec.name}: commit ended {status.state.value}")
    return result, t1 - t0, t2 - t1


def drop(config: dict, topics: list[str]) -> None:
    """Delete the run's topics: noida-db keeps every record in memory and re-saves all of
    them in the background, which would slow the later repeats of both sides (and end
    in the broker being killed for memory)."""
    from onceflow.kafka.admin import delete_topics

    delete_topics(config, topics)
    topics.clear()


def open_session(spec, work: Path, connect: bool, master: str = "local[2]", jars: list[Path] = ()):
    """The benchmark's Spark session, with every data source ``spec`` writes registered: a local one on
    ``master`` (with ``jars`` on its classpath), or (``connect``) a client of a Spark Connect server
    (local[2]) started under ``work``. Returns (session, the server's process or None); stop both when done."""
    from onceflow.spark.batch_job import register_data_sources

    if connect:
        from onceflow.spark.shipping import shipped_code
        from onceflow.spark.connect import CONNECT_MODE_VAR, join_session
        from onceflow_devkit.services.process import ManagedProcess
        from onceflow_devkit.services.spark_connect import start_connect_server

        server_process = ManagedProcess("spark-connect", work / "spark-connect")
        server = start_connect_server(server_process, die_with_parent=True)
        spark = join_session(server.url, shipped_code(spec))
        os.environ[CONNECT_MODE_VAR] = "1"  # this process talks to the server only (connect.connect_mode)
    else:
        from onceflow.spark.local_session import local_spark

        server_process = None
        spark = local_spark("onceflow-bench-job", master=master, **{"spark.ui.showConsoleProgress": "false"},
                            **({"spark.jars": ",".join(map(str, jars))} if jars else {}))
        spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark, spec)
    return spark, server_process


def commit_with_retries(coordinator, seq: int, deadline_s: float = 60.0):
    """coordinator.commit, retried on RetryLater as the Airflow commit task is (the retries are timed)."""
    from onceflow.core.errors import RetryLater

    give_up = time.monotonic() + deadline_s
    while True:
        try:
            return coordinator.commit(seq)
        except RetryLater:
            if time.monotonic() > give_up:
                raise
            time.sleep(1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--splits", type=int, default=4, help="sink splits (Spark partitions per output)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the input and output topics")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--connect", action="store_true", help="run in a Spark Connect server's session (local[2])")
    parser.add_argument("--plain-headers", action="store_true",
                        help="the plain side's Kafka records carry onceflow's headers too: prices them apart")
    parser.add_argument("--plain-concurrent", action="store_true",
                        help="the plain side writes its outputs at once, one driver thread each")
    parser.add_argument("--plain-connector", action="store_true",
                        help="the plain side reads and writes Kafka with Spark's own connector (local sessions)")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="sample each timed run's Python processes with py-spy; raw stacks into DIR")
    args = parser.parse_args(argv)
    if args.plain_connector and args.connect:
        parser.error("--plain-connector runs in a local session (the connector's jars join its classpath): drop --connect")
    jars = []
    if args.plain_connector:
        from onceflow_devkit.services.spark_kafka import connector_jars

        jars = connector_jars()

    from onceflow.kafka.admin import ensure_topics

    from onceflow_devkit.services.stack import environment_broker

    broker = environment_broker()
    config = broker.config()
    run_tag = uuid.uuid4().hex[:6]
    input_topic = f"bench-clicks-{run_tag}"
    ensure_topics(config, [input_topic], partitions=args.partitions)
    start = time.perf_counter()
    produce_events(config, input_topic, args.events, args.partitions)
    print(f"# broker {broker.name}: {args.events} events produced to {input_topic} in {time.perf_counter() - start:.1f} s",
          flush=True)

    work = Path(tempfile.mkdtemp(prefix="onceflow-bench-job-"))
    spark, server_process = open_session(job_spec("registration", input_topic, args.splits), work, args.connect, args.master,
                                         jars)
    made: list[str] = []  # output topics, dropped after each repeat
    cpu: list[tuple[CpuMeter, CpuMeter]] = []  # (plain, onceflow) per repeat
    plain_s, once_s = [], []
    stages: list[tuple[dict, dict]] = []  # (plain, onceflow) seconds per stage, per repeat
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)

    def profiled(name: str):
        return PythonProfile(args.profile / f"{name}.txt") if args.profile else contextlib.nullcontext()
    try:
        def fresh(tag: str):
            spec = job_spec(f"{run_tag}-{tag}", input_topic, args.splits)
            ensure_topics(config, kafka_targets(spec), partitions=args.partitions)
            made.extend(kafka_targets(spec))
            return spec

        # Warm-up, untimed: JVM code paths, Python workers and both writers' data sources.
        warm = 5_000
        spec = fresh("warm-p")
        ranges = plan_ranges(spec, broker, work / "warm-p")
        run_plain(spark, spec, broker, [dataclasses.replace(r, end=min(r.end, r.start + warm)) for r in ranges],
                  config, work / "warm-p-out", args.splits, connector=args.plain_connector)
        run_onceflow(spark, dataclasses.replace(fresh("warm-o"), max_records_per_partition=warm), broker, work / "warm-o", CpuMeter())
        drop(config, made)

        for i in range(args.repeat):
            plain_cpu, once_cpu = CpuMeter(), CpuMeter()
            # Alternate which side goes first, so neither always inherits the other's after-effects.
            for side in ("plain", "onceflow") if i % 2 == 0 else ("onceflow", "plain"):
                if side == "plain":
                    spec = fresh(f"p{i}")
                    ranges = plan_ranges(spec, broker, work / f"plain-{i}")
                    wait_for_quiet()
                    with profiled(f"plain-{i}"), plain_cpu:
                        t0 = time.perf_counter()
                        count, plain_stages = run_plain(spark, spec, broker, ranges, config, work / f"plain-out-{i}",
                                                        args.splits, args.plain_headers, args.plain_concurrent,
                                                        args.plain_connector)
                        plain_s.append(time.perf_counter() - t0)
                    if count != args.events:
                        raise RuntimeError(f"plain run {i} read {count} events, expected {args.events}")
                else:
                    with profiled(f"onceflow-{i}"):
                        once_stages = run_onceflow(spark, fresh(f"o{i}"), broker, work / f"once-{i}", once_cpu, args.events)
                    once_s.append(once_stages["job"] + once_stages["commit"])
            print(f"repeat {i}: plain {plain_s[-1]:.1f} s, onceflow {once_s[-1]:.1f} s (job {once_stages['job']:.1f} s, "
                  f"commit {once_stages['commit']:.1f} s), ratio {once_s[-1] / plain_s[-1]:.3f}; CPU s of other processes "
                  f"(broker, S3) during plain {plain_cpu.others_s:.1f}, during onceflow {once_cpu.others_s:.1f}; "
                  f"own CPU s {plain_cpu.own_s:.1f} / {once_cpu.own_s:.1f}", flush=True)
            print("  stages, plain / onceflow s: " + ", ".join(
                f"{name} {plain_stages[name]:.1f} / {once_stages[name]:.1f}" for name in plain_stages) + ", commit - / "
                f"{once_stages['commit']:.1f}", flush=True)
            cpu.append((plain_cpu, once_cpu))
            stages.append((plain_stages, once_stages))
            drop(config, made)
    finally:
        spark.stop()
        if server_process is not None:
            server_process.stop(grace=5)
        shutil.rmtree(work, ignore_errors=True)
        drop(config, made + [input_topic])
    p, o = statistics.median(plain_s), statistics.median(once_s)
    paired = statistics.median(x / y for x, y in zip(once_s, plain_s))
    print(json.dumps({
        "events": args.events, "spark": "connect" if args.connect else args.master, "plain_headers": args.plain_headers, "plain_concurrent": args.plain_concurrent, "plain_connector": args.plain_connector, "splits": args.splits, "partitions": args.partitions, "broker": broker.name,
        "plain_s": round(p, 2), "onceflow_s": round(o, 2),
        "plain_events_per_s": round(args.events / p), "onceflow_events_per_s": round(args.events / o),
        "ratio": round(o / p, 3), "median_repeat_ratio": round(paired, 3), "target_met": max(o / p, paired) <= 1.15,
        "own_cpu_s": [round(statistics.median(m[side].own_s for m in cpu), 1) for side in (0, 1)],
        "others_cpu_s": [round(statistics.median(m[side].others_s for m in cpu), 1) for side in (0, 1)],
        "stage_s": {name: [round(statistics.median(r[side][name] for r in stages), 2) for side in (0, 1)]
                    for name in stages[0][0]},
        "commit_s": round(statistics.median(r[1]["commit"] for r in stages), 2),
    }))
    if args.profile:
        print_profile(args.profile, args.repeat, args.events)
    return 0


def print_profile(profile_dir: Path, repeats: int, events: int) -> None:
    """Per category, the median Python CPU seconds per million events of each side's timed runs."""
    sides = {side: [categorized(profile_dir / f"{side}-{i}.txt") for i in range(repeats)] for side in ("plain", "onceflow")}
    names = sorted(set().union(*(c for runs in sides.values() for c in runs)),
                   key=lambda n: -statistics.median(c[n] for c in sides["onceflow"]))
    per_million = 1_000_000 / events
    print("Python CPU s per million events (py-spy, median of the repeats), plain / onceflow:")
    for name in [*names, "all"]:
        plain, once = (statistics.median((sum(c.values()) if name == "all" else c[name]) for c in runs) * per_million
                       for runs in sides.values())
        print(f"  {name:78s} {plain:6.2f} / {once:6.2f}")


if __name__ == "__main__":
    sys.exit(main())
