"""What exactly-once costs the whole clickstream job: run_batch + commit vs the same job written plainly.

    .venv/bin/python benchmarks/spark_job.py [--events 1000000] [--repeat 3] [--splits 4] [--master local[2]]

Uses the broker ``onceflow.settings.kafka_broker()`` names (``onceflow
services up``, or ONCEFLOW_KAFKA_BOOTSTRAP). ``--events`` click events (5%
malformed) are produced once to a fresh input topic of ``--partitions``
partitions; then, in ONE Spark session, alternating ``--repeat`` times:

- plain: the same ``onceflow_kafka_range`` read of the same ranges (input cost
  equal), the same transform, ``page_minute_counts`` by ``df.write.parquet``
  (no staging) and each Kafka output by a plain, non-transactional
  confluent-kafka producer inside ``mapInArrow`` (returning counts), to fresh
  topics. No ledger, no votes, no commit.
- onceflow: a fresh pipeline (own name, output topics, warehouse, hence a
  fresh ledger) planned over all events, ``run_batch`` (staged files, open
  transactions, votes) then ``coordinator.commit`` (promotion, EndTxn from the
  votes, verification). Timed from job start to commit done; the clean-up
  after commit (``after_commit``: mirror offsets, drop staged copies) is
  outside the timing, as it is outside the batch's latency.

An untimed warm-up (plain, 5,000 events per partition) runs first.
Both sides repartition every output to ``--splits`` (the plan's sink splits).
Prints one line per repeat, then the medians, events/s and the ratio
onceflow/plain (issue 5 target: <= 1.15).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

PRODUCER_TUNING = {"linger.ms": 20, "queue.buffering.max.messages": 500_000}


def produce_events(config: dict, topic: str, events: int, partitions: int) -> None:
    from onceflow.pipelines.clickstream_data import generate, produce

    produce({**config, **PRODUCER_TUNING}, topic, generate(events, seed=1), partitions)


def job_spec(tag: str, input_topic: str, splits: int):
    from onceflow.pipelines.clickstream import CLICKSTREAM
    from onceflow.spec import FILES, KAFKA, SinkSpec

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


def plain_producer(config: dict, topic: str):
    """mapInArrow function (executor): produce each row's key/value, yield the count."""

    def produce_partition(batches):
        import pyarrow as pa
        from confluent_kafka import Producer

        producer = Producer({**config, **PRODUCER_TUNING})
        sent = 0
        for batch in batches:
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            for key, value in zip(keys, values):
                while True:
                    try:
                        producer.produce(topic, key=key, value=value)
                        break
                    except BufferError:
                        producer.poll(0.1)
            sent += batch.num_rows
        if producer.flush(120):
            raise RuntimeError(f"{topic}: records still unsent after 120 s")
        yield pa.RecordBatch.from_pydict({"sent": [sent]})

    return produce_partition


def run_plain(spark, spec, deployment: str, ranges, config: dict, out_dir: Path, splits: int) -> int:
    """The same read and transform as run_batch, written with no staging and no transactions (driver)."""
    from onceflow.spark.batch_job import read_input

    records = read_input(spark, spec, ranges, deployment).cache()
    count = records.count()
    outputs = spec.transform_function()(records, "0000000001")
    for sink in spec.sinks:
        frame = outputs[sink.name].repartition(splits)
        if sink.kind == "files":
            frame.write.parquet(str(out_dir / sink.name))
        else:
            sent = frame.select("key", "value").mapInArrow(plain_producer(config, sink.target), "sent long")
            sent.agg({"sent": "sum"}).collect()
    records.unpersist()
    return count


def commit_with_retries(coordinator, seq: int, deadline_s: float = 60.0):
    """coordinator.commit, retried on RetryLater as the Airflow commit task is (the retries are timed)."""
    from onceflow.protocol.errors import RetryLater

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
    args = parser.parse_args(argv)

    from onceflow import settings
    from onceflow.kafka.admin import ensure_topics
    from onceflow.runtime import Deployment, PipelineRuntime
    from onceflow.spark.batch_job import register_data_sources, run_batch
    from onceflow.spark_session import local_spark

    broker = settings.kafka_broker()
    config = broker.config()
    run_tag = uuid.uuid4().hex[:6]
    input_topic = f"bench-clicks-{run_tag}"
    ensure_topics(config, [input_topic], partitions=args.partitions)
    start = time.perf_counter()
    produce_events(config, input_topic, args.events, args.partitions)
    print(f"# broker {broker.name}: {args.events} events produced to {input_topic} in {time.perf_counter() - start:.1f} s",
          flush=True)

    spark = local_spark("onceflow-bench-job", master=args.master, **{"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    work = Path(tempfile.mkdtemp(prefix="onceflow-bench-job-"))
    plain_s, once_s = [], []
    try:
        for i in range(args.repeat):
            # plain
            spec = job_spec(f"{run_tag}-p{i}", input_topic, args.splits)
            ensure_topics(config, kafka_targets(spec), partitions=args.partitions)
            deployment = Deployment(f"file://{work}/plain-{i}", broker)
            runtime = PipelineRuntime(spec, deployment)
            with runtime.offset_source() as source:  # the ranges only; this plan is never run
                ranges = runtime.coordinator.plan_next(source, runtime.plan_config(), run_id=f"plain-{i}").ranges
            if i == 0:  # warm-up, untimed: JVM code paths and Python workers of both writers
                head = [dataclasses.replace(r, end=min(r.end, r.start + 5_000)) for r in ranges]
                run_plain(spark, spec, deployment.to_option(), head, config, work / "warm-up", args.splits)
            t0 = time.perf_counter()
            count = run_plain(spark, spec, deployment.to_option(), ranges, config, work / f"plain-out-{i}", args.splits)
            plain_s.append(time.perf_counter() - t0)
            print(f"repeat {i}: plain {plain_s[-1]:.1f} s", flush=True)
            if count != args.events:
                raise RuntimeError(f"plain run {i} read {count} events, expected {args.events}")

            # onceflow
            spec = job_spec(f"{run_tag}-o{i}", input_topic, args.splits)
            ensure_topics(config, kafka_targets(spec), partitions=args.partitions)
            runtime = PipelineRuntime(spec, Deployment(f"file://{work}/once-{i}", broker))
            with runtime.offset_source() as source:
                plan = runtime.coordinator.plan_next(source, runtime.plan_config(), run_id=f"once-{i}")
            if plan.records != args.events:
                raise RuntimeError(f"onceflow plan {plan.batch_id} covers {plan.records} events, expected {args.events}")
            t0 = time.perf_counter()
            run_batch(spark, runtime, plan.batch_seq)
            t1 = time.perf_counter()
            status = commit_with_retries(runtime.coordinator, plan.batch_seq)
            t2 = time.perf_counter()
            once_s.append(t2 - t0)
            if status.state.value != "committed":
                raise RuntimeError(f"batch {plan.batch_id} of {spec.name}: commit ended {status.state.value}")
            runtime.after_commit(plan)
            print(f"repeat {i}: onceflow {once_s[-1]:.1f} s (job {t1 - t0:.1f} s, commit {t2 - t1:.1f} s), "
                  f"ratio {once_s[-1] / plain_s[-1]:.3f}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    p, o = statistics.median(plain_s), statistics.median(once_s)
    print(json.dumps({
        "events": args.events, "splits": args.splits, "partitions": args.partitions, "broker": broker.name,
        "plain_s": round(p, 2), "onceflow_s": round(o, 2),
        "plain_events_per_s": round(args.events / p), "onceflow_events_per_s": round(args.events / o),
        "ratio": round(o / p, 3), "target_met": o / p <= 1.15,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
