"""Audit by replay: each committed batch computed again from its plan and
compared with what its outputs hold, batch by batch and output by output.

For every selected committed batch (Spark driver; the reads run on executors)::

    plan     = the batch's immutable plan                   from the ledger: which batches, which ranges
    records  = exactly plan.ranges, read_committed          the batch job's own input data source
    expected = spec.transform(records, plan.batch_id)       {output: DataFrame}
    found    = kind.committed_output(...)                   what readers of each output see of the batch,
                                                            by the output's own marks (SinkKind)

and, per batch and output, with rows compared whole (as JSON, without the
ignored columns):

- duplicates: copies of an expected row beyond the expected number;
- missing: expected copies that are not there;
- unexpected: rows the replay does not produce (an aborted attempt's, another
  batch's, an edited row), and, in a full audit, rows of batches that never
  committed.

An output whose guarantee is weaker than exactly_once (``SinkSpec.guarantee``, as each
batch's plan recorded it) is held to its own promise: at_least_once fails only on missing
rows, none only on copies; what each may show (duplicates, missing rows, rows its job wrote
under a batch that did not commit) is counted.

Plus each output's findings (a manifest naming a file that is gone, a file no
manifest lists) and the committed ranges' gaps and overlaps (I1, I8).

The ledger says only *which* batches committed and their plans; the votes are
never read, so the audit shares no bookkeeping with the commit it checks. A
plan that names a batch it replaces is not taken at its word: only a
replacement of the same interval with the same ranges excuses the replaced
batch's rows from the outputs (``replaced_batches``); any other is reported
and the batch it names is audited as its own —
except on a Kafka broker whose profile shows aborted records to
read_committed consumers (Tansu), where only the votes can tell a committed
record from an aborted one, and the report says so. A replay equals the original only for a
deterministic transform: ignore columns of processing time or random ids.
"""

from __future__ import annotations

import functools
import random
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence, Set

from onceflow.config.settings import ConfigurationError
from onceflow.sinks import AuditScope, sink_kind, committed_reader
from onceflow.core.plan import AT_LEAST_ONCE, EXACTLY_ONCE, NO_GUARANTEE
from onceflow.ops.audit.ranges import accounted_plans, contiguity_errors, replaced_batches, uncommitted_plans
from onceflow.spark.batch_job import read_input, register_data_sources, release


@dataclass
class BatchDiff:
    """One output of one batch: rows the replay produced against rows found."""

    batch: str
    output: str
    expected: int = 0
    found: int = 0
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0

    # Rows under a batch the ledger shows not committed (aborted, or in flight), in an output whose
    # guarantee lets them stay (written visibly by the job): counted, not failed.
    not_committed: int = 0
    guarantee: str = EXACTLY_ONCE

    @property
    def ok(self) -> bool:
        """What the output's guarantee promises: at_least_once counts its copies (duplicates, rows
        written before an abort) and fails only on what is missing; none counts what is missing."""
        tolerated = TOLERATED[self.guarantee]
        return not any(getattr(self, what) for what in ("duplicates", "missing", "unexpected") if what not in tolerated)


# What an output of each guarantee may show without failing the audit (counted all the same).
TOLERATED = {EXACTLY_ONCE: (), AT_LEAST_ONCE: ("duplicates",), NO_GUARANTEE: ("missing",)}


@dataclass
class OutputReport:
    name: str
    reading: str
    batches: list[BatchDiff] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    set_aside: int = 0  # CommittedOutput.set_aside: seen, not compared
    guarantee: str = EXACTLY_ONCE

    def total(self, what: str) -> int:
        return sum(getattr(b, what) for b in self.batches)

    @property
    def ok(self) -> bool:
        return not self.findings and all(b.ok for b in self.batches)


@dataclass
class ReplayReport:
    pipeline: str
    committed_batches: int
    audited: list[str]
    ignored_columns: list[str]
    outputs: dict[str, OutputReport]
    contiguity_errors: list[str]
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # batches an operator skipped: their input is in the quarantine
    # Replacements the ledger names but does not justify: the batches they name are audited as their own.
    replacements_refused: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.contiguity_errors and all(o.ok for o in self.outputs.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "pipeline": self.pipeline,
            "committed_batches": self.committed_batches,
            "audited_batches": self.audited,
            "ignored_columns": self.ignored_columns,
            "contiguity_errors": self.contiguity_errors,
            "skipped_batches": self.skipped,
            "replacements_refused": self.replacements_refused,
            "seconds": round(self.seconds, 1),
            "outputs": {
                name: {"ok": o.ok, "guarantee": o.guarantee, "reading": o.reading, "findings": o.findings,
                       "examples": o.examples, "set_aside": o.set_aside,
                       **{what: o.total(what) for what in ("expected", "found", "duplicates", "missing", "unexpected",
                                                           "not_committed")},
                       "batches": [{**asdict(b), "ok": b.ok} for b in o.batches]}
                for name, o in self.outputs.items()
            },
        }

    def summary(self) -> str:
        lines = [f"audit of {self.pipeline} by replay: {'OK' if self.ok else 'FAILED'} — {len(self.audited)} of "
                 f"{self.committed_batches} committed batches replayed in {self.seconds:.0f} s"
                 + (f", ignoring columns {', '.join(self.ignored_columns)}" if self.ignored_columns else "")]
        for o in self.outputs.values():
            lines.append(f"  {o.name:<20} {o.total('found'):>8} rows found, {o.total('expected')} replayed  "
                         f"duplicates {o.total('duplicates')}  missing {o.total('missing')}  "
                         f"unexpected {o.total('unexpected')}"
                         + (f"  ({o.guarantee}: {', '.join(TOLERATED[o.guarantee])} counted, not failed; "
                            f"{o.total('not_committed')} rows of batches not committed)" if o.guarantee != EXACTLY_ONCE else ""))
            lines += [f"    batch {b.batch}: {b.found} found, {b.expected} replayed, duplicates {b.duplicates}, "
                      f"missing {b.missing}, unexpected {b.unexpected}" for b in o.batches if not b.ok]
            lines += [f"    finding: {f}" for f in o.findings]
            lines += [f"    set aside (not compared): {o.set_aside} rows"] if o.set_aside else []
            lines += [f"    e.g. {e}" for e in o.examples]
            lines.append(f"    read: {o.reading}")
        lines += [f"  contiguity: {e}" for e in self.contiguity_errors]
        lines += [f"  replacement not taken: {r}; that batch's input is expected in every output"
                  for r in self.replacements_refused]
        lines += [f"  skipped by an operator (input in the quarantine, not replayed): {', '.join(self.skipped)}"] \
            if self.skipped else []
        return "\n".join(lines)


def parse_batches(text: str) -> set[int]:
    """``"3-7,9"`` -> {3, 4, 5, 6, 7, 9}."""
    seqs: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if match is None:
            raise ConfigurationError(f"--batches {text!r}: give batch numbers and ranges, e.g. 3-7,9")
        first, last = int(match[1]), int(match[2] or match[1])
        seqs.update(range(first, last + 1))
    return seqs


def select(committed: list, batches: str | None = None, sample: int | None = None, seed: int = 0) -> list:
    """The committed (plan, status) pairs to replay: the committed ones ``batches`` names,
    a ``sample`` of them drawn with ``seed``, or all."""
    chosen = committed
    if batches:
        wanted = parse_batches(batches)
        chosen = [c for c in committed if c[0].batch_seq in wanted]
        if not chosen:  # in a range, batches that aborted are passed over
            raise ConfigurationError(f"--batches {batches}: no committed batch among them: "
                                     "`onceflow status` lists the pipeline's batches")
    if sample is not None and sample < len(chosen):
        chosen = sorted(random.Random(seed).sample(chosen, sample), key=lambda c: c[0].batch_seq)
    return chosen


def _rows(frame, columns: Sequence[str]):
    """(batch, row as JSON) of every row: rows are compared whole, whatever their types."""
    from pyspark.sql import functions as F

    return frame.select("batch", F.to_json(F.struct(*(F.col(c) for c in columns))).alias("row"))


def _compare(expected, found, columns: Sequence[str], audited: Sequence[str], report: OutputReport,
             examples: int, guarantees: Mapping[str, str] | None = None, uncommitted: Set[str] = frozenset()) -> None:
    """``guarantees``: each batch's guarantee for this output, as its plan recorded it (default: the
    report's); ``uncommitted``: the batches the ledger shows not committed."""
    from pyspark.sql import functions as F

    want = _rows(expected, columns).groupBy("batch", "row").agg(F.count("*").alias("expected"))
    have = _rows(found, columns).groupBy("batch", "row").agg(F.count("*").alias("found"))
    rows = want.join(have, ["batch", "row"], "full_outer").fillna(0, ["expected", "found"])
    extra, short = F.col("found") - F.col("expected"), F.col("expected") - F.col("found")
    per_batch = rows.groupBy("batch").agg(
        F.sum("expected").alias("expected"), F.sum("found").alias("found"),
        F.sum(F.when((F.col("expected") > 0) & (extra > 0), extra).otherwise(0)).alias("duplicates"),
        F.sum(F.when(short > 0, short).otherwise(0)).alias("missing"),
        F.sum(F.when(F.col("expected") == 0, F.col("found")).otherwise(0)).alias("unexpected"),
    ).collect()
    guarantees = guarantees or {}
    diffs = {r["batch"]: BatchDiff(r["batch"], report.name, *(int(r[k]) for k in
                                                             ("expected", "found", "duplicates", "missing", "unexpected")),
                                   guarantee=guarantees.get(r["batch"], report.guarantee))
             for r in per_batch}
    for diff in diffs.values():  # rows a weaker guarantee's job wrote visibly in a batch that did not commit
        if diff.guarantee != EXACTLY_ONCE and diff.batch in uncommitted and not diff.expected:
            diff.not_committed, diff.unexpected = diff.unexpected, 0
    # Every audited batch is listed, an empty one too; batches outside them only when something is there.
    report.batches = [diffs.pop(b, BatchDiff(b, report.name, guarantee=guarantees.get(b, report.guarantee))) for b in audited] + sorted(diffs.values(), key=lambda d: d.batch)
    if not report.ok:
        for r in rows.filter(F.col("expected") != F.col("found")).orderBy("batch", "row").limit(examples).collect():
            report.examples.append(f"batch {r['batch']}: {r['row'][:300]} replayed {r['expected']}x, found {r['found']}x")


def replay_audit(spark, runtime, batches: str | None = None, sample: int | None = None, seed: int = 0,
                 ignore_columns: Sequence[str] = (), examples: int = 5) -> ReplayReport:
    """Replay the selected committed batches of ``runtime``'s pipeline and compare every output
    (module docstring)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    started = time.monotonic()
    spec, deployment = runtime.spec, runtime.deployment
    committed, skipped = accounted_plans(runtime.reader)
    weaker = any(s.guarantee != EXACTLY_ONCE for s in spec.sinks) or any(
        s.guarantee != EXACTLY_ONCE for p, _ in committed for s in p.sinks)
    uncommitted = uncommitted_plans(runtime.reader) if weaker else {}
    chosen = select(committed, batches, sample, seed)
    register_data_sources(spark, spec)
    committed_reader.register(spark)
    # A reprocessed interval's commit removed the batch it replaces from outputs that replace.
    replaced, refused = replaced_batches(runtime.reader, committed)
    transform = spec.transform_function()

    expected: dict[str, list] = {s.name: [] for s in spec.sinks}
    schemas: dict[str, Any] = {}
    inputs = []
    reports: dict[str, OutputReport] = {}
    audited = [p.batch_id for p, _ in chosen]
    scope_batches = frozenset(audited) if (batches or sample is not None) else None
    statuses = {p.batch_id: s for p, s in committed}
    try:
        for plan, _ in chosen:
            records = read_input(spark, spec, plan.ranges, deployment.to_option()).cache()
            inputs.append(records)
            outputs = transform(records, plan.batch_id)
            for sink in spec.sinks:
                schemas.setdefault(sink.name, outputs[sink.name].schema)
                if plan.batch_seq in replaced and sink_kind(sink.kind).reprocess(sink) == "replaced":
                    continue
                expected[sink.name].append(outputs[sink.name].withColumn("batch", F.lit(plan.batch_id)))
        unknown = sorted(set(ignore_columns) - {name for schema in schemas.values() for name in schema.names})
        if unknown and schemas:
            raise ConfigurationError(f"--ignore-columns names {unknown}, which no output of pipeline {spec.name!r} "
                                     "has: name columns of the transform's outputs")
        for sink in spec.sinks:
            if sink.name not in schemas:  # nothing to replay: nothing committed yet
                reports[sink.name] = OutputReport(sink.name, "no committed batch selected")
                continue
            # A column added between batches (schema change) is null in the earlier batches' replay.
            want = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), expected[sink.name]) \
                if expected[sink.name] else None
            schema = StructType([f for f in want.schema.fields if f.name != "batch"]) if want is not None \
                else schemas[sink.name]
            with_batch = StructType([*schema.fields, StructField("batch", StringType())])
            want = want if want is not None else spark.createDataFrame([], with_batch)
            scope = AuditScope(scope_batches, schema, statuses)
            output = sink_kind(sink.kind).committed_output(spark, sink, spec, deployment, scope)
            found = output.frame if output.frame is not None else spark.createDataFrame([], with_batch)
            columns = [c for c in found.columns if c != "batch" and c not in ignore_columns]
            report = OutputReport(sink.name, output.reading, findings=list(output.findings), set_aside=output.set_aside,
                                  guarantee=sink.guarantee)
            guarantees = {p.batch_id: s.guarantee for p in [*(p for p, _ in committed), *uncommitted.values()]
                          for s in p.sinks if s.name == sink.name}  # each batch's, as its plan recorded it
            _compare(want.select(*columns, "batch"), found.select(*columns, "batch"), columns, audited, report, examples,
                     guarantees, set(uncommitted))
            reports[sink.name] = report
    finally:
        for records in inputs:
            release(records)
    tiles = sorted([*(p for p, _ in committed if p.batch_seq not in replaced), *skipped], key=lambda p: p.batch_seq)
    return ReplayReport(spec.name, len(committed), audited, list(ignore_columns), reports, contiguity_errors(tiles),
                        time.monotonic() - started, skipped=[p.batch_id for p in skipped], replacements_refused=refused)
