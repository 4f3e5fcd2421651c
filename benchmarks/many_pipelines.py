"""Many pipelines on one deployment: what grows with the number of pipelines on one Airflow.

    .venv/bin/python benchmarks/many_pipelines.py [--pipelines 1,10,50] [--minutes M] [--rate R]
        [--quick] [--plot benchmarks/many_pipelines.png] [--readme]

Starts the dev kit's stack with its 3-node Apache Kafka 4.4 cluster (replication 3), Redis, and one
Spark Connect server (local[2]: one JVM for every pipeline's spark task, where spark-submit would
start a JVM per batch: fifty pipelines fit on 2 cores this way only). Then, for each N, a fresh Airflow (CeleryExecutor, two workers, its metadata
on the stack's PostgreSQL, a triggerer) with N pipelines, each its own input topic and outputs: the
example's clickstream transform with its cheapest outputs, Parquet files and its two Kafka topics
(the Iceberg table left out), one split each. Even-numbered pipelines run on their input
(``when_input(records=BURST)``, the trigger looking every 5 s), odd-numbered ones on a clock
(``DeltaTriggerTimetable``). Input arrives in bursts of BURST records, each pipeline's bursts (and
runs) every N / R minutes, the pipelines' phases spread, so the deployment runs R batches a minute
at every N; input comes for ``--minutes``, or until every pipeline had its turn.

Per N it measures:

- after one untimed batch (the workers' and the Spark Connect server's first of the deployment),
  trigger to committed, from the ledger's own timestamps: a batch's COMMIT done marker minus, for an
  input-driven pipeline, the Kafka timestamp of the batch's oldest input record (the producer's
  clock: the record's arrival), for a scheduled one, the run's scheduled time (its run id);
- CPU seconds per minute of the scheduler's and the triggerer's process trees (psutil), and of every
  other component (dag-processor, api-server, the workers with their task processes, the Kafka
  nodes, the Spark Connect server): where the growth comes from;
- Kafka requests per second of onceflow's triggers, counted by the brokers: their RequestMetrics
  (``BrokerRequests.java`` reads them through each node's local management agent), the clients'
  requests only, over a minute with only the input-driven pipelines unpaused and no input, less a
  minute with every DAG paused;
- the transactional ids the brokers hold for this N's pipelines (ListTransactions);
- the onceflow page's pipeline list (``GET /onceflow/api/pipelines?health=true``): its first answer
  and the median of the next ones;
- at the end, ``onceflow audit`` of every pipeline: each input record once in its outputs.

``--quick``: N = 1 and 3 for 2 minutes each, to smoke the script (about 15 minutes).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
README = HERE / "README.md"
BLOCK = "many-pipelines"
BURST = 200  # records per batch
# Batches a minute in all: one pipeline alone must not be held back by its own previous batch
# (about 30 s from a burst to its commit on 2 busy cores), nor fifty take hours to come round.
RATE = 1.5
INPUT_PARTITIONS = 2
LOOK_S = 5.0  # the input trigger's poll (when_input's default)
LEAD_S = 10.0  # a scheduled pipeline's burst comes this long before its run
WINDOW_S = 60.0  # each broker-request window
DRAIN_S = 300.0  # how long the batches in flight get to finish after the input stops
PAGE_SAMPLES = 5
# Requests the Kafka nodes send one another (replication, the KRaft quorum), not a client's.
BETWEEN_NODES = {"FetchFollower", "BrokerHeartbeat", "BrokerRegistration", "ControllerRegistration", "Vote",
                 "BeginQuorumEpoch", "EndQuorumEpoch", "FetchSnapshot", "AlterPartition", "AssignReplicasToDirs",
                 "AddRaftVoter", "RemoveRaftVoter", "UpdateRaftVoter"}
SCHEDULED_RUN = re.compile(r"^scheduled__(\d{4}-\d\d-\d\dT[0-9:.]+[+-]\d\d:\d\d)")

# An Airflow DAG file (Airflow's safe mode reads only files that say "airflow" and "dag"): the
# pipelines in pipelines.json beside it, each spec serialized once by the benchmark.
DAG_FILE = '''# Airflow DAGs of benchmarks/many_pipelines.py
import json
from datetime import timedelta
from pathlib import Path

from airflow.timetables.trigger import DeltaTriggerTimetable
from onceflow.airflow.dag_factory import pipeline_dag
from onceflow.config.input_schedule import when_input
from onceflow.pipeline.spec import PipelineSpec

for p in json.loads((Path(__file__).parent / "pipelines.json").read_text()):
    schedule = (when_input(records=p["burst"], poll_s=p["look_s"]) if p["on_input"]
                else DeltaTriggerTimetable(timedelta(seconds=p["period_s"])))
    globals()[p["name"]] = pipeline_dag(PipelineSpec.from_json(p["spec"]), dag_id=p["name"], schedule=schedule)
'''


# -- the deployment's shape: pure ----------------------------------------------------------------
@dataclass(frozen=True)
class Pipeline:
    name: str
    on_input: bool  # run by its input's trigger; else by the clock
    phase_s: float  # its first burst (and run) after the start of the run
    period_s: float  # between its bursts (and runs)


def deployment(n: int, rate_per_min: float) -> list[Pipeline]:
    """N pipelines, input-driven and scheduled alternating, ``rate_per_min`` batches a minute in all,
    one every 60 / rate seconds across the deployment."""
    period = 60.0 * n / rate_per_min
    return [Pipeline(f"n{n:02d}p{i:02d}", i % 2 == 0, 60.0 * i / rate_per_min, period) for i in range(n)]


def run_minutes(n: int, rate_per_min: float, minutes: float) -> float:
    """How long input arrives: ``minutes``, or longer when the last pipeline's turn comes later."""
    return max(minutes, n / rate_per_min)


def bursts(pipelines: list[Pipeline], minutes: float) -> list[tuple[float, Pipeline]]:
    """(seconds after the start, pipeline) of every burst within ``minutes``, in time order. A
    scheduled pipeline's burst comes ``LEAD_S`` before its run (its first run comes as it is
    unpaused, at its phase)."""
    out = []
    for p in pipelines:
        first = p.phase_s if p.on_input else max(0.0, p.phase_s - LEAD_S)
        out += [(first + k * p.period_s, p) for k in range(int((minutes * 60 - first) // p.period_s) + 1)
                if first + k * p.period_s < minutes * 60]
    return sorted(out, key=lambda x: x[0])


# -- figures: pure -------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100): a value of the sample, never interpolated."""
    if not 0 < q <= 100:
        raise ValueError(f"a percentile is above 0 and at most 100, not {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def scheduled_at_ms(run_id: str | None) -> int | None:
    """When a scheduled run was due (its run id is ``scheduled__<run_after>``), in epoch ms."""
    match = SCHEDULED_RUN.match(run_id or "")
    return int(datetime.fromisoformat(match.group(1)).timestamp() * 1000) if match else None


def parse_requests(text: str) -> dict[str, int]:
    """``BrokerRequests.java``'s output: request type -> requests answered by the brokers to clients.
    Kafka counts a fetch twice, as ``Fetch`` and as ``FetchConsumer`` or ``FetchFollower``: the sum
    is left out, with the requests the nodes send one another."""
    counts = {name: int(count) for name, count in (line.split() for line in text.splitlines() if line.strip())}
    return {name: count for name, count in counts.items() if name != "Fetch" and name not in BETWEEN_NODES}


def request_rate(before: dict[str, int], after: dict[str, int], seconds: float) -> dict[str, float]:
    """Requests per second of each type between two counts (types absent before count from 0)."""
    return {k: (after[k] - before.get(k, 0)) / seconds for k in after if after[k] != before.get(k, 0)}


def beyond(rate: dict[str, float], baseline: dict[str, float]) -> dict[str, float]:
    """``rate`` less ``baseline``, type by type, the types that rose."""
    out = {k: v - baseline.get(k, 0.0) for k, v in rate.items()}
    return {k: round(v, 3) for k, v in out.items() if v > 0.005}


# -- measuring -----------------------------------------------------------------------------------
def tree_cpu_s(pid: int | None) -> float:
    """CPU seconds of a process and its descendants (the live ones, and those it reaped)."""
    import psutil

    if pid is None:
        return 0.0
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            t = process.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


def broker_requests(pids: list[int]) -> dict[str, int]:
    done = subprocess.run(["java", str(HERE / "BrokerRequests.java"), *map(str, pids)], capture_output=True, text=True,
                          timeout=120)
    if done.returncode:
        raise RuntimeError(f"BrokerRequests.java failed: {done.stderr[-800:]}")
    return parse_requests(done.stdout)


def requests_per_s(pids: list[int], seconds: float) -> dict[str, float]:
    before = broker_requests(pids)
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return request_rate(before, broker_requests(pids), elapsed)


def spec_of(name: str):
    """The clickstream transform with files and its two Kafka outputs, one split each."""
    from onceflow.pipeline.spec import FILES, KAFKA, SinkSpec
    from onceflow_examples.clickstream import CLICKSTREAM

    return replace(CLICKSTREAM, name=name, topics=(f"{name}-clicks",), sinks=(
        SinkSpec("page_minute_counts", FILES, f"{name}/page_minute_counts", splits=1),
        SinkSpec("clicks_enriched", KAFKA, f"{name}-clicks_enriched", splits=1),
        SinkSpec("clicks_dead_letter", KAFKA, f"{name}-clicks_dead_letter", dead_letter=True, splits=1),
    ))


@dataclass
class Services:
    """What every N shares: the stack (Kafka cluster, PostgreSQL), Redis, the Spark Connect server."""

    stack: object
    info: object
    redis: object
    redis_process: object
    spark: object
    spark_process: object
    work: Path
    components: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class Latencies:
    """Seconds of each committed batch: trigger to its COMMIT done marker, split at its plan (the
    trigger to the plan: Airflow's part; the plan to the marker: the batch's own)."""

    committed: list[float] = field(default_factory=list)
    to_plan: list[float] = field(default_factory=list)
    batch: list[float] = field(default_factory=list)
    aborted: int = 0
    in_window: int = 0  # batches planned while the CPU was measured


def latencies(runtime, pipeline: Pipeline, config: dict, window_ms: tuple[int, int], into: Latencies) -> None:
    """The committed batches of ``pipeline`` planned from the window's start on (and its aborted ones,
    counted) into ``into``; ``in_window`` counts those planned before its end."""
    from confluent_kafka import TopicPartition

    from onceflow.core.states import BatchState
    from onceflow.kafka.offsets import KafkaOffsetSource

    reader = runtime.reader
    with KafkaOffsetSource(config) as source:
        for seq in range(1, reader.latest_seq() + 1):
            status = reader.describe(seq)
            if status.plan.created_at_ms < window_ms[0]:
                continue
            into.in_window += status.plan.created_at_ms <= window_ms[1]
            if status.state is BatchState.ABORTED:
                into.aborted += 1
            done = reader.committed_at_ms(seq) if status.state is BatchState.COMMITTED else None
            if done is None:
                continue
            if pipeline.on_input:
                starts = {TopicPartition(r.topic, r.partition): r.start for r in status.plan.ranges if r.end > r.start}
                stamps = [s for s in source.timestamps_at(starts).values() if s is not None]
                triggered = min(stamps) if stamps else None
            else:
                triggered = scheduled_at_ms(status.plan.run_id)
            planned = status.plan.created_at_ms
            if triggered is not None:
                into.committed.append((done - triggered) / 1000)
                into.to_plan.append((planned - triggered) / 1000)
            into.batch.append((done - planned) / 1000)


def transactional_ids(config: dict, prefix: str) -> int:
    """The transactional ids the brokers hold that start with ``prefix`` (ListTransactions)."""
    from kafka import KafkaAdminClient

    from onceflow.kafka.config import kafka_python_config

    admin = KafkaAdminClient(**kafka_python_config(config), request_timeout_ms=30_000)
    try:
        by_broker = admin.list_transactions()  # each broker's share of __transaction_state
    finally:
        admin.close()
    return sum(1 for listings in by_broker.values() for t in listings if t.transactional_id.startswith(prefix))


def page_list_s(api_url: str) -> tuple[float, float]:
    """The onceflow page's pipeline list: its first answer's seconds, and the median of the next ones."""
    import httpx

    samples = []
    with httpx.Client(base_url=api_url, timeout=120, trust_env=False) as client:
        for _ in range(PAGE_SAMPLES):
            started = time.perf_counter()
            client.get("/onceflow/api/pipelines", params={"health": "true"}).raise_for_status()
            samples.append(time.perf_counter() - started)
            time.sleep(1)
    return samples[0], statistics.median(samples[1:])


def run_n(services: Services, n: int, minutes: float, rate: float) -> dict:
    """One deployment of ``n`` pipelines, run for ``minutes``; its figures."""
    from onceflow.kafka.admin import ensure_topics
    from onceflow.pipeline.runtime import Deployment, PipelineRuntime
    from onceflow_examples.clickstream_data import generate, produce
    from onceflow_devkit.airflow_env import onceflow_airflow
    from onceflow_devkit.audit.clickstream_audit import audit_clickstream

    minutes = run_minutes(n, rate, minutes)
    root = services.work / f"n{n}"
    dags = root / "dags"
    dags.mkdir(parents=True)
    kafka = services.info.kafka
    config = kafka.config()
    warehouse = f"file://{root / 'warehouse'}"
    pipelines = deployment(n, rate)
    specs = {p.name: spec_of(p.name) for p in pipelines}
    ensure_topics(config, [t for s in specs.values() for t in (*s.topics, *(k.target for k in s.sinks if k.kind == "kafka"))],
                  partitions=INPUT_PARTITIONS, replication_factor=-1)
    (dags / "pipelines.json").write_text(json.dumps([
        {"name": p.name, "on_input": p.on_input, "period_s": p.period_s, "burst": BURST, "look_s": LOOK_S,
         "spec": specs[p.name].to_json()} for p in pipelines]))
    (dags / "many_pipelines_dags.py").write_text(DAG_FILE)
    airflow = onceflow_airflow(root / "airflow", kafka, warehouse, dags_folder=dags, plugins_folder=None,
                               spark_connect=services.spark, triggerer=True, postgres=services.info.postgres,
                               celery=services.redis)
    brokers = services.stack.kafka_pids()
    runtimes = {p.name: PipelineRuntime(specs[p.name], Deployment(warehouse, kafka)) for p in pipelines}
    result: dict = {"n": n, "on_input": sum(p.on_input for p in pipelines), "minutes": minutes, "rate_per_min": rate,
                    "burst": BURST}
    print(f"# N={n}: {result['on_input']} input-driven, {n - result['on_input']} scheduled, a burst of {BURST} records "
          f"per pipeline every {pipelines[0].period_s:.0f} s", flush=True)
    with airflow, airflow.api() as api:
        for p in pipelines:
            api.wait_for_dag(p.name, timeout=300)
        baseline = requests_per_s(brokers, WINDOW_S)
        for p in pipelines:
            if p.on_input:
                api.unpause(p.name)
        time.sleep(3 * LOOK_S)  # the triggerer starts the watchers
        with_triggers = requests_per_s(brokers, WINDOW_S)
        result["trigger_requests_per_s"] = beyond(with_triggers, baseline)
        print(f"  triggers' requests/s at the brokers: {sum(result['trigger_requests_per_s'].values()):.1f} "
              f"{result['trigger_requests_per_s']}", flush=True)

        warm_up(runtimes[pipelines[0].name], lambda: produce(config, specs[pipelines[0].name].topics[0],
                                                            generate(BURST, seed=-1, malformed_ratio=0.05),
                                                            partitions=INPUT_PARTITIONS))
        measured_from_ms = int(time.time() * 1000)
        parts = {"scheduler": [airflow.process("scheduler").running_pid()],
                 "triggerer": [airflow.process("triggerer").running_pid()],
                 "dag-processor": [airflow.process("dag-processor").running_pid()],
                 "api-server": [airflow.process("api-server").running_pid()],
                 "workers": [airflow.process(c).running_pid() for c in airflow.components if c.startswith("celery-worker")],
                 "kafka": brokers, "spark-connect": [services.spark_process.running_pid()]}
        cpu_before = {k: sum(tree_cpu_s(pid) for pid in pids) for k, pids in parts.items()}
        started = time.monotonic()
        produced = BURST + feed(api, pipelines, lambda p, seed: produce(
            config, specs[p.name].topics[0], generate(BURST, seed=seed, malformed_ratio=0.05), partitions=INPUT_PARTITIONS),
            minutes)
        elapsed = time.monotonic() - started
        measured_to_ms = int(time.time() * 1000)
        cpu = {k: (sum(tree_cpu_s(pid) for pid in pids) - cpu_before[k]) * 60 / elapsed for k, pids in parts.items()}
        result["cpu_s_per_min"] = {k: round(v, 2) for k, v in cpu.items()}
        result["page_list_first_s"], result["page_list_s"] = page_list_s(airflow.api_url)
        print(f"  CPU s/min: {result['cpu_s_per_min']}; page list {result['page_list_first_s']:.2f} s first, "
              f"{result['page_list_s']:.2f} s after", flush=True)
        for p in pipelines:
            if not p.on_input:
                api.pause(p.name)  # no new scheduled run; the input-driven ones finish their bursts
        drain_until = time.monotonic() + DRAIN_S
        while time.monotonic() < drain_until and any(_busy(runtimes[p.name], p) for p in pipelines):
            time.sleep(5)
        for p in pipelines:
            api.pause(p.name)

    result["transactional_ids"] = transactional_ids(config, f"onceflow.n{n:02d}p")
    seconds, audited, failed = Latencies(), 0, []
    for p in pipelines:
        latencies(runtimes[p.name], p, config, (measured_from_ms, measured_to_ms), seconds)
        report = audit_clickstream(runtimes[p.name])
        audited += report.input_records
        if not report.ok:
            failed.append(report.summary())

    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 2) if values else None

    result.update({
        "batches": len(seconds.batch), "aborted": seconds.aborted, "records_produced": produced,
        "records_audited": audited, "latency_median_s": median(seconds.committed),
        "latency_p95_s": round(percentile(seconds.committed, 95), 2) if seconds.committed else None,
        "trigger_to_plan_median_s": median(seconds.to_plan), "plan_to_commit_median_s": median(seconds.batch),
        "audit": "ok" if not failed else failed,
        "worker_cpu_s_per_batch": round(cpu["workers"] * elapsed / 60 / max(1, seconds.in_window), 1),
        "spark_cpu_s_per_batch": round(cpu["spark-connect"] * elapsed / 60 / max(1, seconds.in_window), 1),
    })
    aborted = seconds.aborted
    print(f"  {result['batches']} batches committed ({aborted} aborted), trigger to committed median "
          f"{result['latency_median_s']} s, p95 {result['latency_p95_s']} s; {result['transactional_ids']} "
          f"transactional ids; audit {'ok' if not failed else 'FAILED'} ({audited} of {produced} records committed)",
          flush=True)
    for text in failed:
        print(text, flush=True)
    return result


def feed(api, pipelines: list[Pipeline], produce_burst, minutes: float) -> int:
    """Each pipeline's bursts in time for ``minutes``, and the scheduled ones unpaused at their
    phases (their first run comes then); the records produced."""
    started = time.monotonic()
    scheduled = sorted(((p.phase_s, p) for p in pipelines if not p.on_input), key=lambda x: x[0])
    produced = 0
    for at, p in bursts(pipelines, minutes):
        while scheduled and scheduled[0][0] <= at:
            time.sleep(max(0.0, scheduled[0][0] - (time.monotonic() - started)))
            api.unpause(scheduled.pop(0)[1].name)
        time.sleep(max(0.0, at - (time.monotonic() - started)))
        produced += produce_burst(p, produced)
    for _, p in scheduled:
        api.unpause(p.name)
    time.sleep(max(0.0, minutes * 60 - (time.monotonic() - started)))
    return produced


def warm_up(runtime, produce_burst) -> None:
    """One untimed batch of the first (input-driven) pipeline: the workers' first task processes and
    the Spark Connect server's first session of this deployment are not the figures'."""
    from onceflow.core.states import BatchState

    produce_burst()
    deadline = time.monotonic() + DRAIN_S
    while (latest := runtime.reader.describe()) is None or latest.state is not BatchState.COMMITTED:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm-up batch did not commit within {DRAIN_S:.0f} s: {latest}")
        time.sleep(2)


def _busy(runtime, pipeline: Pipeline) -> bool:
    """Records still to commit, or a batch still in flight."""
    from onceflow.core.lag import input_lag

    latest = runtime.reader.describe()
    if latest is not None and not latest.state.terminal:
        return True
    return pipeline.on_input and any(r["lag"] for r in input_lag(runtime))


# -- the report ----------------------------------------------------------------------------------
def table(results: list[dict]) -> list[str]:
    def cpu(*parts: str):
        return lambda r: " / ".join(f"{r['cpu_s_per_min'][k]:.1f}" for k in parts)

    rows = [
        ("trigger to committed, median / p95 (s)", lambda r: f"**{r['latency_median_s']}** / {r['latency_p95_s']}"),
        ("of which trigger to plan / plan to committed, medians (s)",
         lambda r: f"{r['trigger_to_plan_median_s']} / {r['plan_to_commit_median_s']}"),
        ("batches committed (aborted)", lambda r: f"{r['batches']} ({r['aborted']})"),
        ("CPU s/min: scheduler", cpu("scheduler")),
        ("CPU s/min: triggerer", cpu("triggerer")),
        ("CPU s/min: dag-processor / api-server", cpu("dag-processor", "api-server")),
        ("CPU s/min: workers / Spark Connect / Kafka nodes", cpu("workers", "spark-connect", "kafka")),
        ("CPU s per batch: workers / Spark Connect",
         lambda r: f"{r['worker_cpu_s_per_batch']} / {r['spark_cpu_s_per_batch']}"),
        ("Kafka requests/s of the triggers at the brokers (per trigger)",
         lambda r: f"{sum(r['trigger_requests_per_s'].values()):.1f} ({sum(r['trigger_requests_per_s'].values()) / r['on_input']:.1f})"),
        ("transactional ids at the brokers", lambda r: f"{r['transactional_ids']:,}"),
        ("page list, first / next answers (s)", lambda r: f"{r['page_list_first_s']:.2f} / {r['page_list_s']:.2f}"),
        ("audit: every output exactly once (records)",
         lambda r: f"{'ok' if r['audit'] == 'ok' else 'FAILED'} ({r['records_audited']:,})"),
    ]
    head = "| N pipelines | " + " | ".join(str(r["n"]) for r in results) + " |"
    return [head, "| --- " * (len(results) + 1) + "|", *("| " + name + " | " + " | ".join(cell(r) for r in results) + " |"
                                                          for name, cell in rows)]


def growth(results: list[dict]) -> str:
    """Where the CPU the deployment spends grew from the first N to the last, component by component."""
    first, last = results[0]["cpu_s_per_min"], results[-1]["cpu_s_per_min"]
    grown = sorted(((last[k] - first[k], k) for k in first), reverse=True)
    return (f"from N={results[0]['n']} to N={results[-1]['n']} the CPU grew by {sum(d for d, _ in grown):.1f} s/min: "
            + ", ".join(f"{k} {d:+.1f}" for d, k in grown))


def goals(results: list[dict]) -> list[str]:
    from plots import growth_shape  # benchmarks/ is the script's directory

    first, last = results[0], results[-1]
    xs = [r["n"] for r in results]
    lines = []
    if first["latency_median_s"] and last["latency_median_s"]:
        ratio = last["latency_median_s"] / first["latency_median_s"]
        lines.append(f"latency at N={last['n']} {ratio:.2f}x N={first['n']}'s (goal 1.5x: {'met' if ratio <= 1.5 else 'missed'})")
    triggers = [r["on_input"] for r in results]  # the triggerer's load is the input-driven pipelines
    lines.append("triggerer CPU against the triggers grows "
                 + growth_shape(triggers, [max(r["cpu_s_per_min"]["triggerer"], 1e-3) for r in results])
                 + ", scheduler CPU " + growth_shape(xs, [max(r["cpu_s_per_min"]["scheduler"], 1e-3) for r in results])
                 + " (goal: the triggerer's linear or better)")
    lines.append(f"page list at N={last['n']}: {last['page_list_s']:.2f} s (goal 1 s: "
                 f"{'met' if last['page_list_s'] < 1 else 'missed'})")
    return [*lines, growth(results)]


def markdown(summary: dict) -> str:
    """benchmarks/README.md's block: when, how, the table, the goals and where the CPU went."""
    return "\n".join([
        f"Measured {summary['date']}, commit {summary['commit']}, `{summary['command']}`: {summary['rate_per_min']:g} "
        f"batches a minute in all at every N, bursts of {BURST} records, {summary['minutes']:g} min per N (at least "
        f"N / rate); {summary['batch_cost']}.", "", *table(summary["results"]), "", "; ".join(summary["goals"]) + "."])


def start_services(work: Path) -> Services:
    from onceflow_devkit.services.kafka_broker import CLUSTER
    from onceflow_devkit.services.process import ManagedProcess
    from onceflow_devkit.services.redis import start_redis
    from onceflow_devkit.services.spark_connect import start_connect_server
    from onceflow_devkit.services.stack import EmbeddedStack

    stack = EmbeddedStack(work / "stack", die_with_parent=True, usual_ports=False)
    info = stack.up(CLUSTER)
    redis_process = ManagedProcess("redis", work / "redis")
    redis = start_redis(redis_process, die_with_parent=True)
    spark_process = ManagedProcess("spark-connect", work / "spark-connect")
    spark = start_connect_server(spark_process, env=info.env(), die_with_parent=True)
    return Services(stack, info, redis, redis_process, spark, spark_process, work)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", default="1,10,50", help="the N to deploy, comma-separated")
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="input arriving, per N (at least N / rate: every pipeline's turn comes)")
    parser.add_argument("--rate", type=float, default=RATE, help="batches a minute in all, at every N")
    parser.add_argument("--quick", action="store_true", help="N = 1 and 3, 2 minutes each: a smoke run")
    parser.add_argument("--plot", type=Path, default=None, help="draw the figures into this PNG")
    parser.add_argument("--readme", action="store_true", help=f"write the figures into {README.name}'s {BLOCK} block")
    args = parser.parse_args(argv)
    ns = [1, 3] if args.quick else [int(x) for x in args.pipelines.split(",")]
    minutes = 2.0 if args.quick else args.minutes

    work = Path(tempfile.mkdtemp(prefix="onceflow-bench-many-"))
    work.chmod(0o755)  # the stack's PostgreSQL runs as user postgres when this runs as root
    results = []
    services = None
    try:
        services = start_services(work)
        print(f"# Kafka {services.info.kafka.name} at {services.info.kafka.bootstrap}, Spark Connect local[2], "
              f"CeleryExecutor; {args.rate:g} batches/min at every N, {minutes:g} min per N at least", flush=True)
        for n in ns:
            results.append(run_n(services, n, minutes, args.rate))
    finally:
        if services is not None:
            services.spark_process.stop(grace=5)
            services.redis_process.stop(grace=2)
            services.stack.down()
        shutil.rmtree(work, ignore_errors=True)

    busy = [r for r in results if r["batches"]]
    cost = statistics.median(r["plan_to_commit_median_s"] for r in busy) if busy else math.nan
    worker_cpu = statistics.median(r["worker_cpu_s_per_batch"] for r in busy) if busy else math.nan
    from secured_kafka import commit  # the checkout's short commit id

    summary = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit(),
               "command": " ".join(["benchmarks/many_pipelines.py", *(sys.argv[1:] if argv is None else argv)]),
               "rate_per_min": args.rate, "minutes": minutes, "results": results,
               "batch_cost": f"a batch takes {cost:.1f} s from plan to committed (median) and {worker_cpu:.1f} CPU s "
                             "of its three task processes in the Celery workers"}
    summary["goals"] = goals(results) if len(results) > 1 else []
    print("\n".join(table(results)))
    print("\n".join(summary["goals"]))
    if args.plot and len(results) > 1:
        from plots import draw_growth

        xs = [r["n"] for r in results]
        draw_growth(args.plot, [
            ("trigger to committed", "pipelines", xs,
             {"median": [r["latency_median_s"] or 1e-3 for r in results],
              "p95": [r["latency_p95_s"] or 1e-3 for r in results]}, "seconds"),
            ("CPU by component", "pipelines", xs,
             {k: [max(r["cpu_s_per_min"][k], 1e-2) for r in results] for k in results[0]["cpu_s_per_min"]},
             "CPU s / min"),
            ("the triggers at the brokers", "pipelines", xs,
             {"requests/s": [max(sum(r["trigger_requests_per_s"].values()), 1e-2) for r in results]}, "requests / s"),
            ("the page's pipeline list", "pipelines", xs,
             {"first": [r["page_list_first_s"] for r in results], "next": [r["page_list_s"] for r in results]}, "seconds"),
        ])
        print(f"plot: {args.plot}")
    if args.readme:
        from onceflow_devkit import doc_blocks

        doc_blocks.write(README, BLOCK, markdown(summary))
        print(f"# figures written to {README}'s {BLOCK} block")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
