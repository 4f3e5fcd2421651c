"""What exactly-once file output costs in Spark: onceflow_files vs plain df.write.parquet.

    .venv/bin/python benchmarks/spark_file_sink.py [--rows 1000000] [--repeat 3] [--master local[2]]

Two scenarios, each run side by side in one Spark session, alternating, the
median of ``--repeat`` runs reported:

- ``write``: a cached DataFrame of ``--rows`` rows (5 columns) written as
  Parquet. Baseline: ``df.write.parquet``. onceflow: the ``onceflow_files``
  data source (staged file per task + vote) and ``FileSink.commit`` (rename +
  manifest).
- ``clickstream``: the example pipeline on ``--rows`` generated click events
  (5% malformed) read from Parquet: transform, then its file output
  (``page_minute_counts``) written plainly vs pre-committed and promoted.

Prints one line per scenario with both times, rows/s and the ratio
onceflow/plain (issue 5 target: <= 1.15).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path



def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def staged_write_and_commit(df, sink_uri: str, vote_uri: str, seq: int) -> None:
    from onceflow.sinks.files import FileSink
    from onceflow.sinks.files.data_source import FORMAT
    from onceflow.sinks.votes import read_recorded_vote

    (df.write.format(FORMAT).mode("append").option("sink", "bench").option("path", sink_uri)
       .option("batch_seq", str(seq)).option("attempt", "1").option("vote_path", vote_uri).save())
    result = FileSink("bench", sink_uri).commit(read_recorded_vote(vote_uri))
    if not result.ok:
        raise RuntimeError(result.detail)


def compare(name: str, rows: int, repeat: int, plain, onceflow) -> dict:
    plain_s, once_s = [], []
    for i in range(repeat):
        plain_s.append(timed(lambda: plain(i)))
        once_s.append(timed(lambda: onceflow(i)))
    p, o = statistics.median(plain_s), statistics.median(once_s)
    return {"scenario": name, "rows": rows, "plain_s": round(p, 3), "onceflow_s": round(o, 3),
            "plain_rows_per_s": round(rows / p), "onceflow_rows_per_s": round(rows / o), "ratio": round(o / p, 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq

    from onceflow_examples.clickstream import transform
    from onceflow_examples.clickstream_data import as_kafka_records, generate
    from onceflow.sinks.files.data_source import register
    from onceflow.spark.local_session import local_spark

    spark = local_spark("onceflow-bench", master=args.master, **{"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    work = Path(tempfile.mkdtemp(prefix="onceflow-bench-"))
    results = []
    try:
        df = spark.range(args.rows, numPartitions=4).selectExpr(
            "id", "concat('/page/', id % 50) AS page", "1767225600000 + id * 7 AS ts",
            "cast(id % 1000 AS double) / 10 AS amount", "uuid() AS event_id").cache()
        df.count()
        results.append(compare(
            "write", args.rows, args.repeat,
            lambda i: df.write.mode("overwrite").parquet(str(work / f"plain-{i}")),
            lambda i: staged_write_and_commit(df, str(work / f"once-{i}"), str(work / f"vote-w{i}.json"), i),
        ))
        df.unpersist()

        clicks = work / "clicks.parquet"
        pq.write_table(as_kafka_records(generate(args.rows, seed=1)), clicks, row_group_size=250_000)

        def counts():
            return transform(spark.read.parquet(str(clicks)), "0000000001")["page_minute_counts"]

        results.append(compare(
            "clickstream", args.rows, args.repeat,
            lambda i: counts().write.mode("overwrite").parquet(str(work / f"plain-c{i}")),
            lambda i: staged_write_and_commit(counts(), str(work / f"once-c{i}"), str(work / f"vote-c{i}.json"), i),
        ))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    for r in results:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
