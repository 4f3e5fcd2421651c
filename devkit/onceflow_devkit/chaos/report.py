"""Saved chaos runs, added up and checked against the long run's bar.

Runs wherever the JSON is (``onceflow chaos-report docs/chaos-runs/*.json``):
each file is what ``onceflow chaos --json`` printed. docs/chaos.md's figures
table is this module's Markdown, so it can be regenerated from the saved
runs rather than copied by hand.

The bar (the chaos issues' acceptance, raised from 200 to 1,000 with the
fault kinds that reach stuck batches, oversized records, added partitions
and lost workers): at least ``MIN_FAULTED_BATCHES``
faulted batches in all, every broker and every warehouse covered, every
fault kind injected at least ``MIN_PER_KIND`` times, every run audited OK
with 0 duplicates and 0 missing records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from onceflow_devkit.services.kafka_broker import COMPATIBLE
from onceflow_devkit.chaos.figures import totals
from onceflow_devkit.chaos.runner import WAREHOUSES
from onceflow_devkit.chaos.schedule import ALL_KINDS

MIN_FAULTED_BATCHES = 1000
MIN_PER_KIND = 10


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


def check(runs: Sequence[dict[str, Any]]) -> Verdict:
    """What the saved runs still lack against the bar (nothing: the bar is met)."""
    total = totals(runs)
    short = [f"run {run['reproduce']} ({run['file']}) is not OK: {run['failures'] or 'duplicates or missing records'}"
             for run in runs if not run["ok"]]
    if total["faulted_batches"] < MIN_FAULTED_BATCHES:
        short.append(f"{total['faulted_batches']} faulted batches, the bar is {MIN_FAULTED_BATCHES}")
    # The bar the saved runs were held to: both compatible brokers (runs on Apache Kafka are still to come).
    short += [f"no run on broker {b}" for b in COMPATIBLE if not any(run["broker"] == b for run in runs)]
    short += [f"no run on a {w} warehouse" for w in WAREHOUSES if not any(run["warehouse"] == w for run in runs)]
    short += [f"{kind} injected {total['faults_injected'].get(kind, 0)} times, the bar is {MIN_PER_KIND}"
              for kind in ALL_KINDS if total["faults_injected"].get(kind, 0) < MIN_PER_KIND]
    if total["duplicates"] or total["missing"]:
        short.append(f"{total['duplicates']} duplicates and {total['missing']} missing records")
    return Verdict(tuple(short))


def _per_faulted(figures: dict[str, Any]) -> str:
    """The run's wall time (start, drain and audit included) per faulted batch."""
    return f"{figures['wall_time_s'] / figures['faulted_batches']:.0f} s" if figures["faulted_batches"] else "-"


def markdown(runs: Sequence[dict[str, Any]]) -> str:
    """The figures table: one row per run, then the totals and faults by kind."""
    total = totals(runs)
    lines = [
        "| broker / warehouse | command | batches run | faulted | aborted | recovered by a later run | records in | duplicates | missing | wall time | per faulted batch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        lines.append(
            f"| {run['broker']} / {run['warehouse']} | `{run['reproduce']}` | {run['batches_run']} | "
            f"{run['faulted_batches']} | {run['batches_aborted']} | {run['batches_recovered']} | "
            f"{run['records_in']:,} | {run['duplicates']} | {run['missing']} | {run['wall_time_s'] / 60:.0f} min | "
            f"{_per_faulted(run)} |"
        )
    lines.append(
        f"| all | | {total['batches_run']} | {total['faulted_batches']} | {total['batches_aborted']} | "
        f"{total['batches_recovered']} | {total['records_in']:,} | {total['duplicates']} | {total['missing']} | "
        f"{total['wall_time_s'] / 3600:.1f} h | {_per_faulted(total)} |"
    )
    lines += ["", "| fault kind | batches injected |", "| --- | --- |"]
    lines += [f"| `{kind}` | {total['faults_injected'].get(kind, 0)} |" for kind in ALL_KINDS]
    details = ", ".join(f"`{name}` {count}" for name, count in total["fault_details"].items())
    lines += ["", f"In detail (fault points fired, S3 answers faulted): {details}."]
    return "\n".join(lines)
