"""Reading a batch's planned ranges: onceflow's range data source against Spark's own Kafka source.

    .venv/bin/python benchmarks/spark_kafka_source.py [--events 1000000] [--partitions 4] [--repeat 3]

Uses the broker ONCEFLOW_KAFKA_BOOTSTRAP names (as spark_job.py). ``--events`` click
events are produced once to a fresh topic; then, in ONE local[2] Spark session that
has both on its classpath (Spark's connector for the installed PySpark, fetched by
Maven: ``onceflow_devkit.services.spark_kafka``), ``--repeat`` times, alternately:

- onceflow: ``format("onceflow_kafka_range")`` over the ranges [0, end) of every
  partition, the columns the clickstream transform reads (key, value, timestamp);
- Spark: ``format("kafka")`` with ``assign``, ``startingOffsets``/``endingOffsets`` as
  the same exact offsets and ``kafka.isolation.level=read_committed``, the same columns.

Each read ends in Spark's ``noop`` sink (every row read and its columns built, nothing
written), then again with ``headers`` added; an untimed count after them checks that both
sides read every record once. Prints the median seconds, events/s and
the ratio onceflow/Spark (above 1: onceflow reads faster). An untimed warm-up of each
comes first (the first use of a Python data source costs about 3 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid

from quiet import wait_for_quiet  # noqa: E402 (benchmarks/ is the script's directory)
from spark_job import produce_events, spark_kafka_read  # noqa: E402

COLUMNS = ("key", "value", "timestamp")
READ_TARGET = 0.95  # onceflow's read speed / Spark's own Kafka source's (benchmarks/README.md)


def onceflow_read(spark, ranges, deployment: str, columns):
    return (spark.read.format("onceflow_kafka_range").option("ranges", json.dumps([r.to_dict() for r in ranges]))
            .option("deployment", deployment).option("columns", ",".join(columns)).load())


def timed(frame) -> float:
    started = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from onceflow.config.deployment import Deployment
    from onceflow.kafka.admin import delete_topics, ensure_topics
    from onceflow.kafka.offsets import KafkaOffsetSource
    from onceflow.core.plan import OffsetRange
    from onceflow.sources.kafka import data_source as kafka_source
    from onceflow.spark.local_session import local_spark
    from onceflow_devkit.services.spark_kafka import connector_jars
    from onceflow_devkit.services.stack import environment_broker

    broker = environment_broker()
    config = broker.config()
    topic = f"bench-source-{uuid.uuid4().hex[:6]}"
    ensure_topics(config, [topic], partitions=args.partitions)
    produce_events(config, topic, args.events, args.partitions)
    with KafkaOffsetSource(config) as source:
        stable = source.last_stable_offsets(source.partitions([topic]))
    ranges = [OffsetRange(topic, tp.partition, 0, end) for tp, end in sorted(stable.items(), key=lambda i: i[0].partition)]
    jars = connector_jars()
    spark = local_spark("onceflow-bench-source", master="local[2]", **{
        "spark.jars": ",".join(map(str, jars)), "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    kafka_source.register(spark)
    deployment = Deployment("file:///tmp/onceflow-bench-source", broker).to_option()
    print(f"# broker {broker.name}: {sum(r.size for r in ranges)} events in {args.partitions} partitions; "
          f"Spark's connector: {', '.join(j.name for j in jars)}", flush=True)
    try:
        results = {}
        for columns in (COLUMNS, (*COLUMNS, "headers")):
            warm = [OffsetRange(r.topic, r.partition, 0, min(r.end, 5_000)) for r in ranges]
            timed(onceflow_read(spark, warm, deployment, columns))
            timed(spark_kafka_read(spark, warm, config, columns))
            sides = {"onceflow": [], "spark": []}
            for i in range(args.repeat):
                order = ("onceflow", "spark") if i % 2 == 0 else ("spark", "onceflow")
                for side in order:
                    wait_for_quiet()
                    frame = onceflow_read(spark, ranges, deployment, columns) if side == "onceflow" \
                        else spark_kafka_read(spark, ranges, config, columns)
                    sides[side].append(timed(frame))
                print(f"repeat {i + 1} ({', '.join(columns)}): onceflow {sides['onceflow'][-1]:.2f} s, "
                      f"spark {sides['spark'][-1]:.2f} s", flush=True)
            results[columns] = {side: statistics.median(seconds) for side, seconds in sides.items()}
        events = sum(r.size for r in ranges)
        # Untimed: both sides read every record, each once (a fast read that loses records is no read).
        counted = {side: (frame.count(), frame.select("key", "value").distinct().count()) for side, frame in (
            ("onceflow", onceflow_read(spark, ranges, deployment, COLUMNS)),
            ("spark", spark_kafka_read(spark, ranges, config, COLUMNS)))}
        if any(counts != (events, events) for counts in counted.values()):
            raise SystemExit(f"read (rows, distinct rows) {counted}, planned {events}")
        for columns, median in results.items():
            ratio = median['spark'] / median['onceflow']
            print(f"{', '.join(columns):<32} onceflow {median['onceflow']:6.2f} s ({events / median['onceflow']:>10,.0f}/s)  "
                  f"spark {median['spark']:6.2f} s ({events / median['spark']:>10,.0f}/s)  "
                  f"ratio onceflow/spark speed {ratio:.2f} (target {READ_TARGET}: {'met' if ratio >= READ_TARGET else 'MISSED'})")
    finally:
        spark.stop()
        delete_topics(config, [topic])
    return 0


if __name__ == "__main__":
    sys.exit(main())
