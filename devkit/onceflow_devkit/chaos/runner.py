"""``run_chaos``: N faulted batches of the clickstream DAG in a real Airflow, then an audit.

Runs in the caller's process (``onceflow chaos``, a test). Call sequence::

    stack up (own home) -> S3 fault proxy (S3 warehouse) -> produce input
    -> Spark Connect server (--spark connect; fault injection enabled on its workers)
    -> Airflow up (api-server, scheduler, dag-processor; fault injection enabled)
    -> for each Fault of schedule.fault_sequence(seed): trigger a run, inject, wait
    -> drain: fault-free runs until every input record is in a committed batch
    -> audit every output -> ChaosFigures

Two modes. ``offsets``: the clickstream DAG, each run the next offsets.
``backfill``: the hourly interval pipeline (``clickstream_hourly``), input
stamped over one hour per faulted batch; faulted run n is a manual run of
hour n, and the drain is Airflow backfills of every hour, three at a time
(committed hours are no-ops, aborted ones replay), so the audit also checks
that the intervals tile the log (I8).

Nothing here decides whether exactly-once held except the audit: it reads the
input topic and every real output (Parquet, both Kafka topics, the Iceberg
table, with Spark too when it is in the REST catalog) and counts each input
record in each.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from onceflow.core import faults
from onceflow.kafka.lifetime import DEFAULT_SAFETY_FRACTION
from onceflow.config.settings import ConfigurationError
from onceflow.pipeline.spec import PipelineSpec
from onceflow_devkit.chaos import schedule
from onceflow_devkit.services.kafka_broker import APACHE, CLUSTER, DEFAULT_BROKER
from onceflow_devkit.services.stack import onceflow_home
from onceflow_devkit.services.iceberg_catalog import embedded_catalogs, forget_embedded_catalogs
from onceflow_devkit.chaos.figures import DEFAULT_RECORDS_PER_PARTITION, BatchRun, ChaosFigures, LedgerFigures
from onceflow_devkit.chaos.injectors import Injection, RunTarget, inject, oversized_outcome
from onceflow_devkit.chaos.zombies import ZombiePen

DAG_ID = "clickstream_exactly_once"
HOURLY_DAG_ID = "clickstream_hourly"
MODES = ("offsets", "backfill")
# Airflow's executor in the run: the LocalExecutor, or Celery with two workers and a Redis broker.
EXECUTORS = ("local", "celery")
SECURABLE = (*APACHE, CLUSTER)  # the brokers the dev kit runs on SASL_SSL with the ACL authorizer
HOUR_MS = 3_600_000
WAREHOUSES = ("file", "s3")
# A bucket per run home: an S3 warehouse's embedded Iceberg catalog is found by the warehouse's URI
# (services/iceberg_catalog.py), and two runs side by side that share one drop each other's catalog at
# their start. It happened to a noida and a Tansu run (seed 4704), so the bucket named the broker; then
# to two cluster runs from two checkouts (seed 5502: every batch of it failed), so it names the home.
S3_BUCKET = "chaos-{broker}-{home}"
MALFORMED_RATIO = 0.1
DRAIN_RECORDS_PER_PARTITION = 1_000_000
MAX_DRAIN_RUNS = 4
# The Airflow connection of --postgres's table (dags/clickstream_exactly_once.py reads its id).
TABLE_CONN_ID = "clickstream_table"
# The Kafka outputs' transaction timeout in a chaos run (dags/clickstream_exactly_once.py reads it): a
# commit_delayed fault holds the commit past half of it, the votes' age guard.
TRANSACTION_TIMEOUT_MS = 120_000
# On the 3-node cluster the timeout kinds wait for the broker to abort: 30 s (an age guard of 15 s; a clean
# batch goes from its first Kafka write to its decision in under 5 s).
CLUSTER_TRANSACTION_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class ChaosOptions:
    batches: int
    seed: int
    broker: str = DEFAULT_BROKER
    warehouse: str = "file"            # "file" (file:// under the run's home) or "s3" (moto behind the fault proxy)
    records_per_partition: int = DEFAULT_RECORDS_PER_PARTITION  # per batch; the input topic has 2 partitions
    run_timeout_s: float = 900.0
    kinds: tuple[str, ...] | None = None  # default: every kind the warehouse allows
    home: Path | None = None
    mode: str = "offsets"              # or "backfill" (see the module doc)
    spark: str = "submit"              # or "connect": the spark tasks are clients of one Spark Connect server
    executor: str = "local"            # or "celery": two Celery workers, Redis their broker
    postgres: bool = False             # a PostgreSQL table among the outputs, on a server of its own
    secure: bool = False               # Apache Kafka on SASL_SSL with the ACLs of onceflow.kafka.acls (kafka_security)
    transaction_timeout: int | None = None  # ms; None: the broker's default below
    records_per_split: int | None = None  # the pipeline's (PipelineSpec.records_per_split); None: every sink's splits
    plan_in_spark_task: bool = False   # the DAG without a plan task: the spark task plans (pipeline_dag's setting)
    # Spark reads the Iceberg table in the audit too, when it is in the REST catalog (a file warehouse).
    spark_reads_table: bool = True

    def possible_kinds(self, warehouse_on_s3: bool) -> tuple[str, ...]:
        from onceflow_devkit.services.kafka_broker import ADDS_PARTITIONS, CAPABILITIES, TXN_TIMEOUT_ABORTS

        capabilities = CAPABILITIES[self.broker]
        return schedule.kinds_for(warehouse_on_s3, self.spark, self.mode, ADDS_PARTITIONS in capabilities,
                                  cluster=self.broker == CLUSTER, times_out=TXN_TIMEOUT_ABORTS in capabilities,
                                  postgres=self.postgres, rest_catalog=not warehouse_on_s3)

    @property
    def transaction_timeout_ms(self) -> int:
        """The Kafka outputs' transaction timeout: short where the broker really times transactions out
        and faults wait for it (the 3-node cluster), long elsewhere; ``transaction_timeout`` when given (a
        loaded machine's spark task, whose timeout is half of it, may need longer)."""
        from onceflow_devkit.services.kafka_broker import CLUSTER

        if self.transaction_timeout is not None:
            return self.transaction_timeout
        return CLUSTER_TRANSACTION_TIMEOUT_MS if self.broker == CLUSTER else TRANSACTION_TIMEOUT_MS

    def check(self) -> None:
        from onceflow_devkit.services.kafka_broker import STACK_BROKERS

        if self.batches < 1:
            raise ConfigurationError(f"--batches must be at least 1, got {self.batches}")
        if self.broker not in STACK_BROKERS:
            raise ConfigurationError(f"--broker {self.broker!r}: choose one of {', '.join(STACK_BROKERS)}")
        if self.mode not in MODES:
            raise ConfigurationError(f"--mode {self.mode!r}: choose one of {', '.join(MODES)}")
        if self.executor not in EXECUTORS:
            raise ConfigurationError(f"--executor {self.executor!r}: choose one of {', '.join(EXECUTORS)}")
        if self.spark not in schedule.SPARK_MODES:
            raise ConfigurationError(f"--spark {self.spark!r}: choose one of {', '.join(schedule.SPARK_MODES)}")
        if self.plan_in_spark_task and self.mode != "offsets":
            raise ConfigurationError(f"--plan-in-spark-task builds the offsets DAG (dags/clickstream_exactly_once.py) "
                                     f"without a plan task; --mode {self.mode} runs the hourly DAG, which keeps its own")
        impossible = (set(self.kinds or ()) - set(self.possible_kinds(True)) - set(self.possible_kinds(False))
                      - set(schedule.opt_in_kinds_for(self.spark, self.mode)))
        if impossible:
            raise ConfigurationError(f"fault kinds {sorted(impossible)} cannot happen with --broker {self.broker} "
                                     f"--spark {self.spark} --mode {self.mode}"
                                     + ("" if self.postgres else " without --postgres"))
        if self.warehouse not in WAREHOUSES:
            raise ConfigurationError(f"--warehouse {self.warehouse!r}: choose one of {', '.join(WAREHOUSES)}")
        unknown = set(self.kinds or ()) - set(schedule.KNOWN_KINDS)
        if unknown:
            raise ConfigurationError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(schedule.KNOWN_KINDS)}")
        if self.warehouse == "file" and schedule.S3_FAULTS in (self.kinds or ()):
            raise ConfigurationError("fault kind s3_faults needs --warehouse s3")
        if self.warehouse == "s3" and schedule.CATALOG_KILLED in (self.kinds or ()):
            raise ConfigurationError("fault kind catalog_killed needs --warehouse file: only a file warehouse's "
                                     "tables are in the REST catalog")
        if self.secure and self.broker not in SECURABLE:
            raise ConfigurationError(f"--secure runs Apache Kafka on SASL_SSL: --broker {self.broker} is not one of "
                                     f"{', '.join(SECURABLE)}")
        if self.postgres and self.mode != "offsets":
            raise ConfigurationError("--postgres adds its table to the clickstream DAG of --mode offsets only")


# Sent to a running `onceflow chaos`, it stops after the batch in progress, then drains and audits as usual:
# a run that cannot finish in the time there is still proves what it ran.
STOP_SIGNAL = signal.SIGUSR1


class _StopRequest:
    """Set by STOP_SIGNAL while installed (only the main thread may install a signal handler)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._before = None

    def __enter__(self) -> "_StopRequest":
        if threading.current_thread() is threading.main_thread():
            self._before = signal.signal(STOP_SIGNAL, lambda *_: self.event.set())
        return self

    def __exit__(self, *exc) -> None:
        if self._before is not None:
            signal.signal(STOP_SIGNAL, self._before)


# What a chaos run runs, below the repository: a change elsewhere (docs, tests) does not change what it proved.
RUNNING_CODE = ("src", "devkit", "examples", "dags", "pyproject.toml")


def code_commit() -> str:
    """The commit of the code a run ran on (``+changes`` when its running code differs from it), or
    "unknown" outside a git checkout: a saved run says what it proved."""
    root = Path(__file__).resolve().parents[3]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                                  *RUNNING_CODE], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if changed else "")


def _ledger_figures(coordinator) -> LedgerFigures:
    from onceflow.core.ledger.ledger import BATCH_EFFECT
    from onceflow.core.states import BatchState

    figures = LedgerFigures()
    for seq in range(1, coordinator.latest_seq() + 1):
        status = coordinator.describe(seq)
        figures.batches += 1
        if status.state is BatchState.COMMITTED:
            figures.committed += 1
        elif status.state is BatchState.ABORTED:
            figures.aborted += 1
        else:
            figures.unfinished += 1
        done = status.done.get(BATCH_EFFECT)
        # done_by is "airflow:<dag>/<run id>/<task>#try<n>@<host>:<pid>" (operators.steps)
        if done is not None and f"/{status.plan.run_id}/" not in done.done_by:
            figures.recovered += 1
    return figures


def _input_on_topic(world: "_Run") -> int:
    """Records in the input topic (written without transactions: its offsets count them). The
    input faults add records while runs run; counted here, none can go missing unnoticed."""
    from onceflow_devkit.audit.clickstream_audit import topic_ranges

    return sum(r.end - r.start for r in topic_ranges(world.info.kafka.config(), world.runtime.spec.topics[0]))


def _committed_input(coordinator) -> int:
    from onceflow_devkit.audit.clickstream_audit import committed_plans

    return sum(plan.records for plan, _ in committed_plans(coordinator))


class _Run:
    """One chaos run's world: stack, proxy, Airflow, the harness's runtime."""

    def __init__(self, options: ChaosOptions, say: Callable[[str], None]):
        self.options = options
        self.say = say
        self.home = options.home or (onceflow_home() / "chaos" /
                                     f"{options.broker}-{options.warehouse}{'-secured' if options.secure else ''}")
        self.proxy = None
        self.stack = None
        self.airflow = None
        self.spark_server = None
        self.redis = None  # the Celery broker's process (--executor celery)
        self.table_server = None  # services.postgres.RestartablePostgres of the table output (--postgres)
        self.catalog = None  # services.rest_catalog.RestCatalog of a file warehouse's tables
        self.zombies = None  # zombies.ZombiePen when frozen zombies were asked for
        self._home_lock = None
        self.oversized_at: dict[int, tuple[int, int]] = {}  # faulted run n -> where its oversized record is
        self.backfill = options.mode == "backfill"
        self.dag_id = HOURLY_DAG_ID if self.backfill else DAG_ID
        # Backfill mode: hour n of the input is [first_hour + n h, first_hour + (n + 1) h).
        self.first_hour = (int(time.time() * 1000) // HOUR_MS - options.batches - 1) * HOUR_MS

    def up(self) -> None:
        from onceflow_devkit.airflow_env import onceflow_airflow
        from onceflow.kafka.admin import ensure_topics
        from onceflow.pipeline.runtime import Deployment, PipelineRuntime
        from onceflow_devkit.services.s3 import S3Endpoint
        from onceflow_devkit.services.stack import EmbeddedStack

        options = self.options
        self._hold_home()
        # Not die_with_parent: PR_SET_PDEATHSIG follows the parent *thread*, and
        # a broker restarted by an injector thread would die when that thread
        # ends. A killed harness leaves the stack up; the next run's down() stops it.
        self.stack = EmbeddedStack(self.home / "stack", usual_ports=False)  # runs side by side restart brokers
        self.stack.down()
        self._stop_leftovers()
        shutil.rmtree(self.home, ignore_errors=True)  # every chaos run starts from nothing
        info = self.stack.up(broker=options.broker, secure=options.secure)
        self.info = info
        clients_s3 = None
        if options.warehouse == "s3":
            bucket = S3_BUCKET.format(broker=options.broker, home=hashlib.sha256(str(self.home).encode()).hexdigest()[:8])
            info.s3.client().create_bucket(Bucket=bucket)
            self.warehouse = f"s3://{bucket}/warehouse"
            from onceflow_devkit.chaos.s3_proxy import S3FaultProxy

            self.proxy = S3FaultProxy(info.s3.endpoint_url, seed=options.seed)
            clients_s3 = S3Endpoint(self.proxy.start(), info.s3.access_key, info.s3.secret_key, info.s3.region)
        else:
            self.warehouse = f"file://{self.home / 'warehouse'}"
        forget_embedded_catalogs(self.warehouse)
        if options.warehouse == "file":  # the REST server writes no S3: an S3 warehouse keeps the SQL catalog
            from onceflow_devkit.services.process import ManagedProcess, pick_port
            from onceflow_devkit.services.rest_catalog import start_rest_catalog

            self.catalog = start_rest_catalog(ManagedProcess("iceberg-rest", self.home / "iceberg-rest"),
                                              f"{self.warehouse}/iceberg", port=pick_port(None))
        # The harness reads S3 directly: audits must not depend on the proxy's luck.
        spec = pipeline_spec(options)
        table_env = self._start_table_server() if options.postgres else {}
        direct_s3 = info.s3 if clients_s3 else None
        self.runtime = PipelineRuntime(spec, Deployment(self.warehouse, info.kafka, direct_s3,
                                                        embedded_catalogs(self.warehouse, direct_s3, rest=self.catalog)))
        # On the cluster every topic has the brokers' replication (3, min.insync.replicas 2): with one
        # replica a killed node loses records it acknowledged, and the input with them.
        ensure_topics(info.kafka.config(), ["clicks", *(s.target for s in spec.sinks if s.kind == "kafka")], partitions=2,
                      replication_factor=-1 if options.broker == CLUSTER else 1)
        if options.secure:  # every row of the table, the optional ones too, and nothing more
            from onceflow.kafka.acls import grants
            from onceflow_devkit.services.kafka_security import apply_grants

            apply_grants(info.kafka.config(), grants(spec.kafka_resources()))
        self.fired_log = self.home / "faults-fired.log"
        injection = {faults.RUN_PARAM_GUARD: faults.RUN_PARAM_GUARD_VALUE, faults.FIRED_LOG_VAR: str(self.fired_log)}
        if options.spark == "connect":
            from onceflow_devkit.services.process import ManagedProcess
            from onceflow_devkit.services.spark_connect import RestartableConnectServer

            # Its Python workers get the S3 keys (as a deployment sets them where its server runs) and
            # may be armed with a run's faults, which reach them as a writer option.
            self.spark_server = RestartableConnectServer(ManagedProcess("spark-connect", self.home / "spark-connect"),
                                                         env={**info.s3.credentials_env(), **injection, **table_env,
                                                              **(info.spark_kafka.secrets_env() if info.spark_kafka else {})})
            self.spark_server.start()
        self.airflow = onceflow_airflow(
            self.home / "airflow", info.airflow_kafka, self.warehouse, clients_s3, spark_kafka=info.spark_kafka,
            extra_env={"ONCEFLOW_SCHEDULE": "none", "CLICKSTREAM_TRANSACTION_TIMEOUT_MS": str(options.transaction_timeout_ms),
                       **({"CLICKSTREAM_TABLE_CONNECTION": TABLE_CONN_ID} if options.postgres else {}),
                       **({"CLICKSTREAM_RECORDS_PER_SPLIT": str(options.records_per_split)} if options.records_per_split else {}),
                       **({"CLICKSTREAM_PLAN_IN_SPARK_TASK": "1"} if options.plan_in_spark_task else {}),
                       **injection},
            spark_connect=self.spark_server.server if self.spark_server else None, postgres=info.postgres,
            celery=self._start_celery_broker(), iceberg_rest=self.catalog,
        )
        if self.table_server is not None:
            self.airflow.set_connection(TABLE_CONN_ID, self.table_server.server.connection())
        self.airflow.migrate()
        self.airflow.start(timeout=300)

    def _start_table_server(self) -> dict[str, str]:
        """The table output's PostgreSQL, a server of its own (the one holding Airflow's database must
        not crash with it); what the Spark Connect server's Python workers need to reach it."""
        from onceflow_devkit.services.postgres import RestartablePostgres
        from onceflow_devkit.services.process import ManagedProcess

        self.table_server = RestartablePostgres(ManagedProcess("postgres-table", self.home / "postgres-table"))
        server = self.table_server.start()
        return {f"AIRFLOW_CONN_{TABLE_CONN_ID.upper()}": server.uri()}

    def produce_input(self, sequence: Sequence[schedule.Fault]) -> int:
        from onceflow_examples.clickstream_data import OVERSIZED_PRODUCER, generate, oversized, produce

        per_partition = self.options.records_per_partition
        total = self.options.batches * 2 * per_partition
        events = generate(total, seed=self.options.seed, malformed_ratio=MALFORMED_RATIO)
        if not self.backfill:
            # Batch n reads offsets [(n-1) * per_partition, n * per_partition) of each partition (record i
            # is at offset i // 2 of partition i % 2): an oversized_record fault puts one in its middle.
            for n, fault in enumerate(sequence, 1):
                if fault.kind == schedule.OVERSIZED_RECORD:
                    i = 2 * ((n - 1) * per_partition + per_partition // 2)
                    valid = next(j for j in range(i, total, 2) if events[j].reason is None)
                    events[valid] = oversized(events[valid])
                    self.oversized_at[n] = (0, valid // 2)  # partition, offset
            return produce(self.info.kafka.config(**OVERSIZED_PRODUCER), "clicks", events)
        # Evenly over the hours, then two records stamped two days ahead: every hour of
        # the run is closed at once, and none the scheduler starts holds a record.
        stamps = [self.first_hour + i * (self.options.batches * HOUR_MS // total) for i in range(total)]
        produced = produce(self.info.kafka.config(), "clicks", events, timestamps=stamps)
        ahead = int(time.time() * 1000) + 48 * HOUR_MS
        produce(self.info.kafka.config(), "clicks", generate(2, seed=-1), timestamps=[ahead, ahead])
        return produced

    def hour(self, n: int) -> str:
        """An instant inside the hour after hour ``n``: a manual run's logical date that reads hour ``n``."""
        from datetime import datetime, timezone

        return datetime.fromtimestamp((self.first_hour + (n + 1) * HOUR_MS + HOUR_MS // 2) / 1000, tz=timezone.utc).isoformat()

    def drain_backfill(self, api) -> str:
        """One backfill of every hour, three at a time; its runs' states, counted."""
        from collections import Counter
        from datetime import datetime, timezone

        first = datetime.fromtimestamp(self.first_hour / 1000, tz=timezone.utc).isoformat()
        last = datetime.fromtimestamp((self.first_hour + (self.options.batches - 1) * HOUR_MS) / 1000, tz=timezone.utc).isoformat()
        backfill = api.create_backfill(self.dag_id, first, last, max_active_runs=3, reprocess_behavior="failed")
        api.wait_for_backfill(backfill["id"], timeout=self.options.run_timeout_s * 2)
        states = Counter(run["state"] for run in api.runs(self.dag_id, run_type="backfill"))
        return ", ".join(f"{n} {state}" for state, n in sorted(states.items()))

    def _stop_leftovers(self) -> None:
        """What a killed run of this home left running besides its stack: its pid files go with the home."""
        from onceflow_devkit.services.process import ManagedProcess

        for name in ("spark-connect", "redis", "postgres-table", "iceberg-rest"):
            ManagedProcess(name, self.home / name).stop(grace=5)

    def _hold_home(self) -> None:
        """Fail fast if another chaos run uses this home: this one would stop its stack and delete its state.
        The lock (beside the home, which is deleted) is the open file's, released when this process ends."""
        self.home.parent.mkdir(parents=True, exist_ok=True)
        self._home_lock = open(self.home.parent / f"{self.home.name}.lock", "w")
        try:
            fcntl.flock(self._home_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigurationError(f"another chaos run is using {self.home} (same --broker and --warehouse): "
                                     "wait for it to end, or run another combination beside it") from None

    def _start_celery_broker(self):
        if self.options.executor != "celery":
            return None
        from onceflow_devkit.services.process import ManagedProcess, pick_port
        from onceflow_devkit.services.redis import start_redis

        self.redis = ManagedProcess("redis", self.home / "redis").reset()
        return start_redis(self.redis, port=pick_port(None))  # runs side by side: never the usual port

    def lingering_prepared(self) -> list[str]:
        """Prepared transactions of the pipeline's tables still on the table's server: each holds its
        locks and a slot of max_prepared_transactions, and would block vacuum."""
        from onceflow_postgres_sink import ids
        from onceflow_postgres_sink.tables import prepared

        if self.table_server is None:
            return []
        spec = self.runtime.spec
        with self.table_server.server.connect(autocommit=True) as conn:
            return [gid for sink in spec.sinks if sink.kind == "postgres"
                    for gid in prepared(conn, f"{ids.owner(spec.name, sink.name)}:")]

    def down(self) -> None:
        if self.airflow is not None:
            self.airflow.stop()
        if self.redis is not None:
            self.redis.stop(grace=5)
        if self.table_server is not None:
            self.table_server.stop()
        if self.catalog is not None:
            self.catalog.proc.stop(grace=5)
        if self.spark_server is not None:
            self.spark_server.stop()
        if self.proxy is not None:
            self.proxy.stop()
        if self.stack is not None:
            self.stack.down()
        if self._home_lock is not None:  # the next run of this combination, in this process too, may start
            self._home_lock.close()

    def run_batch(self, api, n: int, fault: schedule.Fault | None, records_per_partition: int) -> tuple[str, str, Injection | None, float]:
        conf = {} if self.backfill else {"max_records_per_partition": records_per_partition}
        if fault is not None and fault.run_param:
            conf[faults.RUN_PARAM] = fault.run_param
        finished = threading.Event()
        started = time.monotonic()
        run_id = api.trigger(self.dag_id, conf=conf, logical_date=self.hour(n - 1) if self.backfill else None)
        result: list[Injection] = []
        thread = None
        if fault is not None:
            target = RunTarget(api, self.dag_id, run_id, self.airflow, self.stack, self.runtime, self.proxy, self.fired_log,
                               finished, started, spark_server=self.spark_server, table_server=self.table_server,
                               catalog=self.catalog, conf=conf, n=n, zombies=self.zombies,
                               vote_age_guard_s=self.options.transaction_timeout_ms * DEFAULT_SAFETY_FRACTION / 1000)

            def work() -> None:
                try:
                    result.append(inject(fault, target))
                except Exception as exc:  # an injector that breaks is a harness failure, reported as such
                    result.append(Injection(fault.kind, False, f"injector failed: {type(exc).__name__}: {exc}"))

            thread = threading.Thread(target=work, name=f"chaos-{n}", daemon=True)
            thread.start()
        try:
            state = api.wait_for_run(self.dag_id, run_id, timeout=self.options.run_timeout_s)
        except Exception as exc:
            state = f"stuck ({exc})"
        finally:
            finished.set()
            if thread is not None:
                thread.join(timeout=600)  # a second run (two_runs_at_once) may outlive this one
        if self.stack.dead_kafka_nodes():  # a failed restart must not sink the next batch
            self.say(f"[chaos]   Kafka was (partly) down after run {run_id}: starting it again")
            self.stack.revive_kafka()
        if self.spark_server is not None and self.spark_server.process.running_pid() is None:
            self.say(f"[chaos]   the Spark Connect server was down after run {run_id}: starting it again")
            self.spark_server.start()
        if self.table_server is not None and self.table_server.process.running_pid() is None:
            self.say(f"[chaos]   the table's PostgreSQL was down after run {run_id}: starting it again")
            self.table_server.start()
        if self.catalog is not None and self.catalog.proc.running_pid() is None:
            self.say(f"[chaos]   the Iceberg REST catalog was down after run {run_id}: starting it again")
            self.catalog = self.catalog.restart()
        return run_id, state, (result[0] if result else None), time.monotonic() - started


def pipeline_spec(options: ChaosOptions) -> PipelineSpec:
    """The pipeline the run's DAG runs: the clickstream example (hourly in backfill mode), with
    --postgres's table among its outputs and --records-per-split's splits."""
    from onceflow_examples.clickstream import CLICKSTREAM, CLICKSTREAM_HOURLY, with_table

    spec = CLICKSTREAM_HOURLY if options.mode == "backfill" else CLICKSTREAM
    spec = replace(spec, records_per_split=options.records_per_split)
    return with_table(spec, TABLE_CONN_ID) if options.postgres else spec


def _fault_points(spec: PipelineSpec) -> list[str]:
    """Every declared fault point but those of sink kinds ``spec`` has no output of (a kind's points
    start with its name): they could never fire."""
    from onceflow.sinks import kinds as sink_kinds

    unused = set(sink_kinds()) - {s.kind for s in spec.sinks}
    return [point for point in faults.declare_all() if point.split(".", 1)[0] not in unused]


def run_chaos(options: ChaosOptions, say: Callable[[str], None] = print) -> ChaosFigures:
    """Run ``options.batches`` faulted batches (fewer if STOP_SIGNAL comes), drain, audit; return the figures."""
    with _StopRequest() as stop:
        return _run_chaos(options, say, stop.event)


def _run_chaos(options: ChaosOptions, say: Callable[[str], None], stop: threading.Event) -> ChaosFigures:
    from onceflow_devkit.audit.clickstream_audit import audit_clickstream
    from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS

    options.check()
    began = time.monotonic()
    kinds = options.kinds or options.possible_kinds(options.warehouse == "s3")
    sequence = schedule.fault_sequence(options.seed, options.batches, kinds, _fault_points(pipeline_spec(options)),
                                       schedule.PLANNING_IN_SPARK if options.plan_in_spark_task else schedule.TASKS)
    figures = ChaosFigures(options.broker, options.warehouse, options.seed, sequence, mode=options.mode, spark=options.spark,
                           executor=options.executor, kinds=options.kinds, commit=code_commit(), postgres=options.postgres,
                           secure=options.secure, transaction_timeout=options.transaction_timeout,
                           records_per_split=options.records_per_split, plan_in_spark_task=options.plan_in_spark_task,
                           records_per_partition=options.records_per_partition)
    world = _Run(options, say)
    try:
        world.up()
        figures.records_in = world.produce_input(sequence)
        say(f"[chaos]   {options.broker}{' secured' if options.secure else ''} / {world.warehouse} / spark {options.spark} / {options.executor} executor"
            f"{' / a PostgreSQL table' if options.postgres else ''}: "
            f"{figures.records_in} input records, "
            f"{options.batches} faulted batches, seed {options.seed}; state in {world.home}")
        if schedule.FROZEN_ZOMBIE in kinds:
            world.zombies = ZombiePen(world.runtime).start()
        with world.airflow.api() as api:
            api.wait_for_dag(world.dag_id, timeout=300)
            api.unpause(world.dag_id)
            for n, fault in enumerate(sequence, 1):
                if stop.is_set():
                    figures.stopped_early = True
                    say(f"[chaos]   stopped ({STOP_SIGNAL.name}) after {n - 1} of {len(sequence)} faulted batches: "
                        "draining and auditing what ran")
                    break
                faulted = fault.kind != schedule.NO_FAULT
                run_id, state, injection, seconds = world.run_batch(api, n, fault if faulted else None,
                                                                    options.records_per_partition)
                batch = world.runtime.batch_of_run(run_id)
                report = "no report" if faulted else "no fault: a batch an earlier batch's zombie may meet"
                record = BatchRun(n, fault, injection or Injection(fault.kind, False, report), run_id, state,
                                  batch.batch_id if batch else None, seconds)
                figures.records_in += record.injection.records_added
                figures.runs.append(record)
                say(record.line())
                if state.startswith("stuck"):
                    figures.failures.append(f"run #{n} {run_id} with {fault.describe()}: {state}")
                    break
            # Drain: everything produced must end up committed, or it counts as missing.
            while not figures.failures and figures.drain_runs < MAX_DRAIN_RUNS:
                if not world.backfill:  # (a backfill's input also holds two records ahead, never read)
                    figures.records_in = max(figures.records_in, _input_on_topic(world))
                # Backfill mode drains with at least one backfill: its committed hours must be no-ops.
                if _committed_input(world.runtime.coordinator) >= figures.records_in and not (world.backfill and not figures.drain_runs):
                    break
                figures.drain_runs += 1
                started = time.monotonic()
                if world.backfill:
                    state = world.drain_backfill(api)
                else:
                    _, state, _, _ = world.run_batch(api, 0, None, DRAIN_RECORDS_PER_PARTITION)
                say(f"[chaos]   drain {'backfill' if world.backfill else 'run'} {figures.drain_runs}: {state} "
                    f"in {time.monotonic() - started:.0f} s")
        zombies = world.zombies.finish() if world.zombies is not None else {}
        for run in figures.runs:
            if run.n in zombies:  # known only once the batch holding its pooled ids next has run
                run.injection = zombies[run.n]
                say(run.line())
            if run.fault.kind == schedule.OVERSIZED_RECORD and not figures.failures:
                run.injection = oversized_outcome(world.runtime.coordinator, run.fault, *world.oversized_at[run.n])
                say(run.line())
        figures.ledger = _ledger_figures(world.runtime.coordinator)
        report = audit_clickstream(world.runtime, hides_aborted=HIDES_ABORTED_RECORDS in world.info.kafka.capabilities,
                                   tables={TABLE_CONN_ID: world.table_server.server} if world.table_server else {},
                                   spark_reads_tables=options.spark_reads_table and world.catalog is not None)
        figures.audit_summary = report.summary()
        figures.table_readers = report.table_readers
        figures.records_committed_in = report.input_records
        figures.records_out = {name: o.records for name, o in report.outputs.items()}
        figures.withheld = {name: o.withheld for name, o in report.outputs.items() if o.withheld}
        figures.duplicates = report.duplicates
        figures.unexpected = sum(o.unexpected for o in report.outputs.values())
        figures.missing = report.missing + max(0, figures.records_in - report.input_records)
        if report.contiguity_errors:
            figures.failures += [f"contiguity: {e}" for e in report.contiguity_errors]
        figures.failures += [f"{name}: readers disagree on {d}" for name, o in report.outputs.items()
                             for d in o.disagreements]
        if figures.ledger.unfinished:
            figures.failures.append(f"{figures.ledger.unfinished} batches left unfinished after the drain")
        figures.failures += [f"left prepared on the table's server: {gid}" for gid in world.lingering_prepared()]
        say(report.summary())
    except Exception as exc:  # reported with the seed and sequence, like any failure
        import traceback

        figures.failures.append(f"harness error: {type(exc).__name__}: {exc}")
        say(traceback.format_exc())
    finally:
        figures.wall_time_s = time.monotonic() - began
        if world.zombies is not None:
            world.zombies.kill_all()
        world.down()
    return figures


def run_matrix(batches: int, seed: int, brokers: Sequence[str], warehouses: Sequence[str], say: Callable[[str], None] = print,
               **options) -> list[ChaosFigures]:
    """``batches`` faulted batches spread evenly over every broker x warehouse combination."""
    combos = [(b, w) for b in brokers for w in warehouses]
    results = []
    for i, (broker, warehouse) in enumerate(combos):
        share = batches // len(combos) + (1 if i < batches % len(combos) else 0)
        if share:
            figures = run_chaos(ChaosOptions(share, seed, broker, warehouse, **options), say)
            say(figures.summary())
            results.append(figures)
    return results
