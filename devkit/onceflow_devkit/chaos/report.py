"""Saved chaos runs, added up per broker and checked against the bars.

Runs wherever the JSON is (``onceflow chaos-report docs/chaos-runs/*.json``):
each file is what ``onceflow chaos --json`` printed. docs/chaos.md's figures
table is this module's Markdown, so it can be regenerated from the saved
runs rather than copied by hand.

A bar per kind of broker (``BARS``): at least ``min_faulted`` faulted
batches on its brokers, each of them and every warehouse covered, every
fault kind it names injected at least ``MIN_PER_KIND`` times, every run
audited OK with 0 duplicates and 0 missing records. The embedded-broker bar
(noida-db and Tansu, 1,000 batches) is the one the runs before Apache Kafka
met; the Apache Kafka bar is the 3-node cluster's, with the kinds only a
cluster and a broker that times transactions out allow; the PostgreSQL bar
counts the cluster's runs with a table among their outputs, and the faults of
its server. The secured bar counts the runs of ``--secure`` alone (a secured
run shows there and nowhere else): 60 faulted batches, each broker-side kind
at least once. The zombies' bar counts the runs that asked for frozen zombies
(an opt-in kind, which no other bar requires): ten zombies that met the batch
holding their pooled transactional ids, on Apache Kafka and a file warehouse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from onceflow_devkit.services.kafka_broker import CLUSTER, COMPATIBLE, DEFAULT_BROKER
from onceflow_devkit.chaos import schedule
from onceflow_devkit.chaos.figures import totals
from onceflow_devkit.chaos.runner import WAREHOUSES

MIN_PER_KIND = 10


@dataclass(frozen=True)
class Bar:
    name: str
    brokers: tuple[str, ...]
    min_faulted: int
    kinds: tuple[str, ...]  # each injected at least MIN_PER_KIND times
    with_table: bool = False  # only the runs with a PostgreSQL table among their outputs (--postgres)
    secured: bool = False  # the runs on a secured broker (--secure), which count under this bar alone
    min_per_kind: int = MIN_PER_KIND
    warehouses: tuple[str, ...] = WAREHOUSES  # each covered by a run
    asked_for: str | None = None  # only the runs whose fault sequence holds this kind

    def includes(self, run: dict[str, Any]) -> bool:
        return (run["broker"] in self.brokers and (run.get("postgres", False) or not self.with_table)
                and run.get("secure", False) == self.secured
                and (self.asked_for is None or any(f["kind"] == self.asked_for for f in run.get("fault_sequence", ()))))


# The REST catalog's kind came after these brokers met their bar; its runs show under their own broker.
EMBEDDED = Bar("Kafka-compatible brokers (noida-db, Tansu): embedded-broker runs", COMPATIBLE, 1000,
               tuple(k for k in schedule.ALL_KINDS if k not in (*schedule.CLUSTER_KINDS, *schedule.TIMEOUT_KINDS,
                                                               *schedule.POSTGRES_KINDS, schedule.CATALOG_KILLED)))
APACHE_CLUSTER = Bar("Apache Kafka, a 3-node cluster", (CLUSTER,), 500,
                     schedule.kinds_for(True, "connect", "offsets", adds_partitions=True, cluster=True, times_out=True))
# The sink written against the public contract alone (examples/postgres_sink), its server crashed and its
# connections cut. Its runs count in the cluster's bar too.
POSTGRES_TABLE = Bar("A PostgreSQL table among the outputs, on the 3-node cluster", (CLUSTER,), 30,
                     schedule.POSTGRES_KINDS, with_table=True)
# SASL_SSL, SCRAM users and the ACLs of `onceflow acls`: every broker-side kind at least once (the failover and
# timeout kinds are the cluster's bar).
SECURED = Bar("Apache Kafka secured (SASL_SSL, SCRAM-SHA-512, the ACLs of `onceflow acls`)", (DEFAULT_BROKER, CLUSTER),
              60, schedule.BROKER_KINDS, secured=True, min_per_kind=1)
# Spark tasks of older batches let go while the batch holding their pooled transactional ids runs.
ZOMBIES = Bar("Zombies across pooled transactional ids (frozen_zombie, Apache Kafka, a file warehouse)",
              (DEFAULT_BROKER,), 10, (schedule.FROZEN_ZOMBIE,), warehouses=("file",), asked_for=schedule.FROZEN_ZOMBIE)
BARS = (APACHE_CLUSTER, POSTGRES_TABLE, SECURED, EMBEDDED, ZOMBIES)


def load_runs(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every run saved in ``paths`` (a file holds one run or, from ``--broker all``, several)."""
    runs = []
    for path in paths:
        saved = json.loads(Path(path).read_text())
        if "runs" not in saved or not saved["runs"] or "broker" not in saved["runs"][0]:
            raise ValueError(f"{path}: not the output of 'onceflow chaos --json' (no runs with a broker)")
        runs += [{**run, "file": Path(path).name} for run in saved["runs"]]
    return runs


@dataclass(frozen=True)
class Verdict:
    shortfalls: tuple[str, ...]

    @property
    def met(self) -> bool:
        return not self.shortfalls


def check(runs: Sequence[dict[str, Any]], bar: Bar) -> Verdict:
    """What the saved runs on ``bar``'s brokers still lack against it (nothing: the bar is met)."""
    runs = [run for run in runs if bar.includes(run)]
    total = totals(runs)
    short = [f"run {run['reproduce']} ({run['file']}) is not OK: {run['failures'] or 'duplicates or missing records'}"
             for run in runs if not run["ok"]]
    if total["faulted_batches"] < bar.min_faulted:
        short.append(f"{total['faulted_batches']} faulted batches, the bar is {bar.min_faulted}")
    short += [f"no run on broker {b}" for b in bar.brokers if not any(run["broker"] == b for run in runs)]
    short += [f"no run on a {w} warehouse" for w in bar.warehouses if not any(run["warehouse"] == w for run in runs)]
    short += [f"{kind} injected {total['faults_injected'].get(kind, 0)} times, the bar is {bar.min_per_kind}"
              for kind in bar.kinds if total["faults_injected"].get(kind, 0) < bar.min_per_kind]
    if total["duplicates"] or total["missing"]:
        short.append(f"{total['duplicates']} duplicates and {total['missing']} missing records")
    return Verdict(tuple(short))


def _readers(run: dict[str, Any]) -> str:
    """The engines the run's audit read its Iceberg table with; runs saved before the field say nothing."""
    return f" (table read by {' and '.join(run['table_readers'])})" if run.get("table_readers") else ""


def _per_faulted(figures: dict[str, Any]) -> str:
    """The run's wall time (start, drain and audit included) per faulted batch."""
    return f"{figures['wall_time_s'] / figures['faulted_batches']:.0f} s" if figures["faulted_batches"] else "-"


def markdown(runs: Sequence[dict[str, Any]]) -> str:
    """The figures, a section per bar (and one for runs on brokers no bar names): a row per run with
    the commit it ran on, then the totals and the faults by kind."""
    groups = [(bar.name, [r for r in runs if bar.includes(r)], bar.kinds) for bar in BARS]
    others = [r for r in runs if not any(bar.includes(r) for bar in BARS)]
    if others:
        groups.append(("Other brokers", others, schedule.ALL_KINDS))
    lines: list[str] = []
    for name, group, kinds in groups:
        lines += [f"#### {name}", ""] + (_table(group, kinds) if group else ["No saved run yet."]) + [""]
    return "\n".join(lines).rstrip()


def _table(runs: Sequence[dict[str, Any]], kinds: Sequence[str]) -> list[str]:
    total = totals(runs)
    lines = [
        "| broker / warehouse | code | command | batches run | faulted | aborted | recovered by a later run | records in | duplicates | missing | wall time | per faulted batch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        lines.append(
            f"| {run['broker']}{' secured' if run.get('secure') else ''} / {run['warehouse']}{_readers(run)} | "
            f"{run.get('commit') or 'not recorded'} | `{run['reproduce']}` | "
            f"{run['batches_run']} | {run['faulted_batches']} | {run['batches_aborted']} | {run['batches_recovered']} | "
            f"{run['records_in']:,} | {run['duplicates']} | {run['missing']} | {run['wall_time_s'] / 60:.0f} min | "
            f"{_per_faulted(run)} |"
        )
    lines.append(
        f"| all | | | {total['batches_run']} | {total['faulted_batches']} | {total['batches_aborted']} | "
        f"{total['batches_recovered']} | {total['records_in']:,} | {total['duplicates']} | {total['missing']} | "
        f"{total['wall_time_s'] / 3600:.1f} h | {_per_faulted(total)} |"
    )
    lines += ["", "| fault kind | batches injected |", "| --- | --- |"]
    lines += [f"| `{kind}` | {total['faults_injected'].get(kind, 0)} |" for kind in kinds]
    details = ", ".join(f"`{name}` {count}" for name, count in total["fault_details"].items())
    lines += ["", f"In detail (fault points fired, S3 answers faulted, connections to the table's server terminated): {details}."]
    return lines
