"""Time from trigger to committed, through real Airflow, spark-submit mode beside Spark Connect mode.

    .venv/bin/python benchmarks/batch_latency.py [--records 1000 100000] [--repeat 3]
        [--modes submit connect connect_all_splits connect_spark_plans] [--scheduler-idle-sleep S] [--records-per-split N]
        [--plot benchmarks/batch_latency.png]

Starts its own embedded stack (Kafka, S3), a Spark Connect server (local[2])
and Airflow with its scheduler, api-server, dag-processor and triggerer (LocalExecutor),
all on 127.0.0.1 under a temporary home. DAGs of the example pipeline
(the clickstream transform, four outputs: Parquet files, an Iceberg table,
two Kafka topics, 2 splits each; ``records_per_split`` 10,000, so a batch of
fewer records writes each output in one split), each with its own topics,
tables and ledger, differ only in their spark connection: ``latency_submit``
runs spark-submit with a ``local[2]`` master, ``latency_connect`` is a client
of the server; ``latency_connect_all_splits`` is ``latency_connect`` without
``records_per_split`` (every output in 2 splits); ``latency_connect_spark_plans``
is ``latency_connect`` without a plan task (``plan_in_spark_task=True``: its
spark task plans the batch, then runs the job).

For each batch size, ``--repeat`` times, each mode once (alternating which goes
first): produce the records, trigger a run through the REST API (the batch
takes every record), wait until the run is done. Stages come from the metadata
database: waiting for the plan task (trigger to its start), plan, the gap to
the spark task (scheduler), spark, the gap to commit, commit; "committed" is
trigger to the commit task's end. In Spark Connect mode the spark task is split
further by the job's own account (the task's XCom): its start (process, DAG
parse, joining the session), the read, the outputs. One untimed run per mode comes first (DAG
parse, the server's Python workers). Prints one line per run, then the medians
as JSON; ``--plot`` draws the median stages of each size and mode as stacked bars
against the 3 s target. Runs on an idle machine: nothing else should run beside it.

Freshness, with the input-driven schedule: another DAG, ``latency_on_input``
(Spark Connect, no plan task, ``when_input(records=1000, max_age_s=5, poll_s=1)``), is never
triggered. For each size, ``--repeat`` times: produce the records, then time
until a read_committed consumer of its enriched-clicks topic has seen every
valid one of them. 1,000 records reach the record threshold at once; 100 wait
for the age rule: the run starts when the oldest is 5 s old less what the
trigger's previous run took to commit.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

# An Airflow DAG file (Airflow's safe mode reads only files that say "airflow" and "dag").
DAG_FILE = '''# Airflow DAGs of the latency benchmark
import dataclasses
from onceflow.airflow.dag_factory import pipeline_dag
from onceflow_examples.clickstream import CLICKSTREAM

from onceflow.config.input_schedule import when_input

RECORDS_PER_SPLIT = {records_per_split}

for mode, conn_id, schedule in (("submit", "onceflow_spark", None), ("connect", "onceflow_spark_connect", None),
                                ("connect_all_splits", "onceflow_spark_connect", None),
                                ("connect_spark_plans", "onceflow_spark_connect", None),
                                ("on_input", "onceflow_spark_connect", when_input(records=1000, max_age_s=5, poll_s=1))):
    spec = dataclasses.replace(
        CLICKSTREAM, name=f"latency_{mode}", topics=(f"latency-{mode}",),
        records_per_split=None if mode == "connect_all_splits" else RECORDS_PER_SPLIT,
        sinks=tuple(dataclasses.replace(s, target=s.target.replace("clickstream", f"latency_{mode}")
                                        if s.kind != "kafka" else f"latency-{mode}-{s.target}") for s in CLICKSTREAM.sinks))
    globals()[f"latency_{mode}"] = pipeline_dag(spec, dag_id=f"latency_{mode}", schedule=schedule, spark_conn_id=conn_id,
                                                plan_in_spark_task=mode in ("connect_spark_plans", "on_input"))
'''
# connect_all_splits: Spark Connect with every output in its sinks' 2 splits (no records_per_split);
# connect_spark_plans: Spark Connect, the DAG without a plan task (its spark task plans); each to time
# beside connect in the same run.
MODES = ("submit", "connect", "connect_all_splits", "connect_spark_plans")
TARGET_S = 3.0  # a 1,000-record batch, Spark Connect, trigger to committed
ON_INPUT = "on_input"


class VisibleCounter:
    """A read_committed consumer of a topic from its start: what a downstream reader sees."""

    def __init__(self, config: dict, topic: str):
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer({**config, "group.id": f"latency-{topic}", "isolation.level": "read_committed",
                                  "enable.auto.commit": False})
        partitions = self.consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        self.seen = 0

    def wait_for(self, total: int, timeout: float) -> float:
        """Poll until ``total`` records have been seen; the time (time.time()) the last one arrived."""
        deadline = time.monotonic() + timeout
        while self.seen < total:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {self.seen} of {total} records visible after {timeout:.0f} s")
            for message in self.consumer.consume(1000, timeout=0.05):
                self.seen += message.error() is None
        return time.time()

    def close(self) -> None:
        self.consumer.close()
STAGES = ("to_plan", "plan", "to_spark", "spark", "to_commit", "commit")
# The spark task split by the job's own account (its XCom): the task's start (process, DAG parse,
# joining the session), the input read, the outputs pre-committed and voted.
SPARK_PARTS = ("spark_start", "read", "outputs")
# spark_plan: the plan inside the spark task, in a DAG without a plan task (its share of the task's start).
DETAIL = ("to_plan", "plan", "to_spark", "spark_plan", *SPARK_PARTS, "to_commit", "commit")


def stages_of(metadata, dag_id: str, run_id: str, triggered: datetime) -> dict[str, float]:
    """The run's stages; a DAG without a plan task (its spark task plans) has no to_plan and plan."""
    windows = metadata.task_windows(dag_id, run_id)
    stages = STAGES if "plan" in windows else STAGES[2:]
    marks = [triggered, *(mark for task in ("plan", "spark", "commit") if task in windows for mark in windows[task])]
    seconds = {name: (b - a).total_seconds() for name, a, b in zip(stages, marks, marks[1:])}
    seconds["committed"] = (windows["commit"][1] - triggered).total_seconds()
    job = (metadata.returned(dag_id, run_id, "spark") or {}).get("seconds")
    if job:  # Spark Connect: the spark task returns the job's report (and its plan's time, when it plans)
        seconds["read"] = job["read"]
        seconds["outputs"] = job["outputs"]
        if "plan" in job:
            seconds["spark_plan"] = job["plan"]
        seconds["spark_start"] = seconds["spark"] - seconds["read"] - seconds["outputs"] - job.get("plan", 0.0)
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES[:2]), help="the spark modes to time")
    parser.add_argument("--scheduler-idle-sleep", type=float, default=None, metavar="S",
                        help="Airflow's [scheduler] scheduler_idle_sleep_time (its default: 1 s)")
    parser.add_argument("--records-per-split", type=int, default=10_000, metavar="N",
                        help="the pipelines' records_per_split (0: every output in its sink's splits, 2)")
    parser.add_argument("--plot", type=Path, default=None, help="draw the median stages into this PNG")
    args = parser.parse_args(argv)
    tuning = ({} if args.scheduler_idle_sleep is None
              else {"AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": str(args.scheduler_idle_sleep)})

    from onceflow.kafka.admin import ensure_topics
    from onceflow_examples.clickstream import CLICKSTREAM
    from onceflow_examples.clickstream_data import generate, produce
    from onceflow_devkit.airflow_env import onceflow_airflow
    from onceflow_devkit.local_airflow.metadata import MetadataDb
    from onceflow_devkit.services.process import ManagedProcess
    from onceflow_devkit.services.spark_connect import start_connect_server
    from onceflow_devkit.services.stack import EmbeddedStack

    home = Path(tempfile.mkdtemp(prefix="onceflow-latency-"))
    home.chmod(0o755)  # the stack's PostgreSQL runs as user postgres when this runs as root
    stack = EmbeddedStack(home / "stack", die_with_parent=True)
    server_process = ManagedProcess("spark-connect", home / "spark-connect")
    info = stack.up()
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    freshness: dict[int, list[float]] = {}
    try:
        server = start_connect_server(server_process, env=info.env(), die_with_parent=True)
        config = info.kafka.config()
        ensure_topics(config, [t for mode in (*MODES, ON_INPUT) for t in (f"latency-{mode}", *(f"latency-{mode}-{s.target}"
                               for s in CLICKSTREAM.sinks if s.kind == "kafka"))], partitions=2)
        dags = home / "dags"
        dags.mkdir()
        (dags / "latency.py").write_text(DAG_FILE.replace("{records_per_split}", str(args.records_per_split or None)))
        airflow = onceflow_airflow(home / "airflow", info.kafka, f"file://{home / 'warehouse'}", dags_folder=dags,
                                   plugins_folder=None, triggerer=True, extra_env=tuning, postgres=info.postgres)
        airflow.set_connection("onceflow_spark_connect", server.connection())
        metadata = MetadataDb(airflow.sql_alchemy_conn)
        with airflow, airflow.api() as api:
            for mode in (*MODES, ON_INPUT):
                api.wait_for_dag(f"latency_{mode}", timeout=180)
                api.unpause(f"latency_{mode}")

            def batch(mode: str, records: int, seed: int) -> dict[str, float]:
                dag_id = f"latency_{mode}"
                produce(config, f"latency-{mode}", generate(records, seed=seed, malformed_ratio=0.05))
                triggered = datetime.now(timezone.utc)
                run_id = api.trigger(dag_id, conf={"max_records_per_partition": None})
                state = api.wait_for_run(dag_id, run_id, timeout=1800)
                if state != "success":
                    raise RuntimeError(f"{dag_id} run {run_id} ended {state}: {api.explain(dag_id, run_id)}")
                return stages_of(metadata, dag_id, run_id, triggered)

            modes = [m for m in MODES if m in args.modes]
            for mode in modes:  # untimed: DAG parse, the first spark-submit's caches, the server's Python workers
                batch(mode, 1000, seed=0)
            for records in args.records:
                for i in range(args.repeat):
                    for mode in modes if i % 2 == 0 else reversed(modes):
                        seconds = batch(mode, records, seed=1 + i)
                        results.setdefault((records, mode), []).append(seconds)
                        print(f"{records} records, {mode:<7} committed {seconds['committed']:.1f} s after the trigger: "
                              + ", ".join(f"{s} {seconds[s]:.1f}" for s in DETAIL if s in seconds), flush=True)

            visible = VisibleCounter(config, "latency-on_input-clicks_enriched")
            try:
                for records in (1000, 100):
                    for i in range(args.repeat):
                        events = generate(records, seed=100 + i, malformed_ratio=0.05)
                        produced = time.time()
                        produce(config, f"latency-{ON_INPUT}", events)
                        seen = visible.wait_for(visible.seen + sum(e.reason is None for e in events), timeout=600)
                        freshness.setdefault(records, []).append(seen - produced)
                        print(f"{records} records, input-driven: all visible to read_committed {seen - produced:.1f} s "
                              "after the produce", flush=True)
            finally:
                visible.close()
    finally:
        server_process.stop(grace=5)
        stack.down()
        shutil.rmtree(home, ignore_errors=True)

    summary = []
    for (records, mode), runs in results.items():
        summary.append({"records": records, "mode": mode, "runs": len(runs),
                        **{name: round(statistics.median(r[name] for r in runs), 2)
                           for name in ("committed", *STAGES, "spark_plan", *SPARK_PARTS) if name in runs[0]}})
    for records in args.records:  # the ratios of modes run side by side
        median = {s["mode"]: s["committed"] for s in summary if s["records"] == records and s.get("mode") in args.modes}
        for mode, other in (("connect", "submit"), ("connect", "connect_all_splits"), ("connect_spark_plans", "connect")):
            if mode in median and other in median:
                summary.append({"records": records, f"{mode}_over_{other}": round(median[mode] / median[other], 3)})
    for records, seconds in freshness.items():
        summary.append({"records": records, "mode": "input-driven (Spark Connect)",
                        "produce_to_visible_s": round(statistics.median(seconds), 2)})
    print(json.dumps(summary, indent=1))
    if args.plot:
        from plots import draw_stages  # benchmarks/ is the script's directory

        rows = {f"{s['records']:,} records, {s['mode']}": s for s in summary if s.get("mode") in MODES}
        draw_stages(args.plot, "trigger to committed through Airflow's scheduler: median stages", rows,
                    [s for s in DETAIL if any(s in row for row in rows.values())], target_s=TARGET_S)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
