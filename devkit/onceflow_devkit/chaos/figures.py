"""What a chaos run reports: per-batch records and the figures built from them.

Everything that claims exactly-once comes from the audit of real outputs
(``audit.clickstream_audit``); the ledger is read only to say how batches
ended (committed, aborted, finished by a later run's recovery).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from onceflow_devkit.chaos.injectors import Injection
from onceflow_devkit.chaos.schedule import NO_FAULT, Fault, sequence_json

DEFAULT_RECORDS_PER_PARTITION = 100  # a batch's input records per partition (the input topic has 2)


@dataclass
class BatchRun:
    """One faulted DAG run of a chaos run."""

    n: int
    fault: Fault
    injection: Injection
    run_id: str
    run_state: str
    batch_id: str | None
    seconds: float

    def line(self) -> str:
        mark = "injected" if self.injection.injected else "        " if self.fault.kind == NO_FAULT else "missed  "
        return (
            f"[chaos]   #{self.n:<3} {self.fault.kind:<19} {mark} run {self.run_state:<7} {self.seconds:5.0f} s "
            f"batch {self.batch_id or '-'}: {self.injection.what}"
        )


@dataclass
class LedgerFigures:
    batches: int = 0
    committed: int = 0
    aborted: int = 0
    recovered: int = 0  # finished by a later run (its plan task's recovery), not by the run that planned it
    unfinished: int = 0


@dataclass
class ChaosFigures:
    """The figures of one chaos run (one broker, one warehouse)."""

    broker: str
    warehouse: str
    seed: int
    sequence: list[Fault]
    mode: str = "offsets"  # "backfill": faulted runs of the hourly interval pipeline, drained by a backfill
    spark: str = "submit"  # "connect": the spark tasks were clients of a Spark Connect server
    executor: str = "local"  # "celery": Airflow's Celery executor, two workers
    kinds: tuple[str, ...] | None = None  # the kinds asked for with --kinds (None: every kind the options allow)
    commit: str = "unknown"  # the code the run ran on (runner.code_commit)
    postgres: bool = False  # a PostgreSQL table among the outputs (--postgres)
    secure: bool = False  # the broker on SASL_SSL with the ACL authorizer (--secure)
    transaction_timeout: int | None = None  # --transaction-timeout-ms, when given
    records_per_split: int | None = None  # --records-per-split, when given
    plan_in_spark_task: bool = False  # --plan-in-spark-task: the DAG had no plan task
    records_per_partition: int = DEFAULT_RECORDS_PER_PARTITION  # --records-per-partition: each batch's input
    stopped_early: bool = False  # stopped by runner.STOP_SIGNAL before the sequence's end (drained and audited)
    runs: list[BatchRun] = field(default_factory=list)
    drain_runs: int = 0
    ledger: LedgerFigures = field(default_factory=LedgerFigures)
    records_in: int = 0               # produced to the input topic
    records_committed_in: int = 0     # input records in committed ranges (audited)
    records_out: dict[str, int] = field(default_factory=dict)
    withheld: dict[str, int] = field(default_factory=dict)  # of records_out: too large for Kafka, published aside
    duplicates: int = 0
    missing: int = 0                  # audited missing + input never committed after the drain
    unexpected: int = 0
    audit_summary: str = ""
    table_readers: list[str] = field(default_factory=list)  # the engines the audit read the Iceberg table with
    failures: list[str] = field(default_factory=list)
    wall_time_s: float = 0.0

    @property
    def faulted_batches(self) -> int:
        return sum(r.injection.injected for r in self.runs)

    @property
    def injected_by_kind(self) -> dict[str, int]:
        return dict(sorted(Counter(r.fault.kind for r in self.runs if r.injection.injected).items()))

    @property
    def missed_by_kind(self) -> dict[str, int]:
        return dict(sorted(Counter(r.fault.kind for r in self.runs
                                   if not r.injection.injected and r.fault.kind != NO_FAULT).items()))

    @property
    def detail_counts(self) -> dict[str, int]:
        """Sub-kinds: fault points fired (point=action) and S3 faults by kind."""
        total: Counter[str] = Counter()
        for r in self.runs:
            total.update(r.injection.counts)
        return dict(sorted(total.items()))

    @property
    def ok(self) -> bool:
        return not (self.failures or self.duplicates or self.missing or self.unexpected)

    def reproduce(self) -> str:
        return (
            f"onceflow chaos --batches {len(self.sequence)} --seed {self.seed} --broker {self.broker} "
            f"--warehouse {self.warehouse}" + (f" --mode {self.mode}" if self.mode != "offsets" else "")
            + (f" --spark {self.spark}" if self.spark != "submit" else "")
            + (f" --executor {self.executor}" if self.executor != "local" else "")
            + (" --postgres" if self.postgres else "")
            + (" --secure" if self.secure else "")
            + (f" --transaction-timeout-ms {self.transaction_timeout}" if self.transaction_timeout else "")
            + (f" --records-per-split {self.records_per_split}" if self.records_per_split else "")
            + (" --plan-in-spark-task" if self.plan_in_spark_task else "")
            + (f" --records-per-partition {self.records_per_partition}"
               if self.records_per_partition != DEFAULT_RECORDS_PER_PARTITION else "")
            + (f" --kinds {','.join(self.kinds)}" if self.kinds else "")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "broker": self.broker,
            "commit": self.commit,
            "warehouse": self.warehouse,
            "mode": self.mode,
            "spark": self.spark,
            "executor": self.executor,
            "postgres": self.postgres,
            "secure": self.secure,
            "records_per_split": self.records_per_split,
            "plan_in_spark_task": self.plan_in_spark_task,
            "records_per_partition": self.records_per_partition,
            "stopped_early": self.stopped_early,
            "seed": self.seed,
            "batches_run": len(self.runs),
            "faulted_batches": self.faulted_batches,
            "faults_injected": self.injected_by_kind,
            "faults_missed": self.missed_by_kind,
            "fault_details": self.detail_counts,
            "drain_runs": self.drain_runs,
            "ledger_batches": self.ledger.batches,
            "batches_committed": self.ledger.committed,
            "batches_aborted": self.ledger.aborted,
            "batches_recovered": self.ledger.recovered,
            "batches_unfinished": self.ledger.unfinished,
            "records_in": self.records_in,
            "records_committed_in": self.records_committed_in,
            "records_out": self.records_out,
            "withheld": self.withheld,
            "duplicates": self.duplicates,
            "missing": self.missing,
            "unexpected": self.unexpected,
            "table_readers": self.table_readers,
            "failures": self.failures,
            "wall_time_s": round(self.wall_time_s, 1),
            "reproduce": self.reproduce(),
            "fault_sequence": json.loads(sequence_json(self.sequence)),
            "runs": [
                {"n": r.n, "fault": r.fault.describe(), "injected": r.injection.injected, "what": r.injection.what,
                 "run_state": r.run_state, "batch": r.batch_id, "seconds": round(r.seconds, 1)}
                for r in self.runs
            ],
        }

    def summary(self) -> str:
        lines = [
            f"chaos {self.broker}{' secured' if self.secure else ''} / {self.warehouse} / {self.mode} / spark {self.spark} / {self.executor} executor"
            f"{' / a PostgreSQL table' if self.postgres else ''} (seed {self.seed}, code {self.commit}): "
            f"{'OK' if self.ok else 'FAILED'} in {self.wall_time_s:.0f} s",
            f"  batches run {len(self.runs)}{f' of {len(self.sequence)} (stopped early)' if self.stopped_early else ''}, faulted {self.faulted_batches}; drain runs {self.drain_runs}",
            f"  faults injected {self.injected_by_kind}",
            f"  faults missed   {self.missed_by_kind}",
            f"  details         {self.detail_counts}",
            f"  ledger: {self.ledger.batches} batches, {self.ledger.committed} committed, {self.ledger.aborted} aborted, "
            f"{self.ledger.recovered} recovered by a later run, {self.ledger.unfinished} unfinished",
            f"  records in {self.records_in} (committed {self.records_committed_in}); out {self.records_out}"
            + (f", of them withheld as too large for Kafka {self.withheld}" if self.withheld else ""),
            f"  duplicates {self.duplicates}, missing {self.missing}, unexpected {self.unexpected}",
        ]
        if self.table_readers:
            lines.append(f"  table read by  {', '.join(self.table_readers)}")
        lines += [f"  FAILURE: {f}" for f in self.failures]
        if not self.ok:
            lines.append(f"  reproduce with: {self.reproduce()}")
            lines.append(f"  fault sequence: {sequence_json(self.sequence)}")
        return "\n".join(lines)


def combined(figures: Sequence[ChaosFigures]) -> dict[str, Any]:
    """Totals over several chaos runs (the broker x warehouse matrix)."""
    return totals([f.to_dict() for f in figures])


def totals(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Totals over runs given as ``ChaosFigures.to_dict()`` (also what ``--json`` saved)."""
    injected: Counter[str] = Counter()
    details: Counter[str] = Counter()
    for run in runs:
        injected.update(run["faults_injected"])
        details.update(run["fault_details"])
    return {
        "ok": all(run["ok"] for run in runs),
        "faulted_batches": sum(run["faulted_batches"] for run in runs),
        "batches_run": sum(run["batches_run"] for run in runs),
        "faults_injected": dict(sorted(injected.items())),
        "fault_details": dict(sorted(details.items())),
        "batches_aborted": sum(run["batches_aborted"] for run in runs),
        "batches_recovered": sum(run["batches_recovered"] for run in runs),
        "records_in": sum(run["records_in"] for run in runs),
        "duplicates": sum(run["duplicates"] for run in runs),
        "missing": sum(run["missing"] for run in runs),
        "wall_time_s": round(sum(run["wall_time_s"] for run in runs), 1),
        "runs": list(runs),
    }
