"""``onceflow audit`` for the clickstream pipeline: count every input record
of the committed ranges in every real output.

Runs anywhere with access to the warehouse and the brokers (CLI, a test, the
demo). It reads:

- the ledger, only for *which* ranges are committed (and checks they are
  contiguous per partition: I1);
- the input topic over those ranges (read_committed), classifying each record
  with an independent Python oracle, not with the Spark transform;
- the committed Parquet of ``page_minute_counts`` (only batches whose
  ``_SUCCESS`` manifest exists), the Iceberg table of ``page_minute_table``
  through its catalog (the current snapshot, as any engine reads it),
  the whole of ``clicks_enriched`` and ``clicks_dead_letter`` as a
  read_committed consumer sees them, and the PostgreSQL table of
  ``clicks_table`` (when the pipeline has it) with plain SQL, as any reader
  sees it;
- with ``spark_reads_tables``, the Iceberg table again through Spark (``audit.table_readers``, a
  REST catalog only), whose rows and snapshots must be pyiceberg's, batch by batch.

Then: per page and minute window the sum of ``views`` equals the number of
valid input events, in the Parquet output and in the table; the table has
one snapshot per committed batch and none of any other, and its current
files are all of committed batches not since replaced; every valid input record appears exactly once in
``clicks_enriched`` and every malformed one exactly once in
``clicks_dead_letter`` (matched by source topic/partition/offset), and
every valid one exactly once in ``clicks_table``; nothing else is visible.
On a broker that shows aborted records to read_committed
consumers (Tansu), output records are first restricted to those the
committed transactions wrote (by offset range and split headers), and the
report says so.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from onceflow.sinks.kafka.headers import batch_and_split
from onceflow.ops.audit.ranges import committed_plans, contiguity_errors, replaced_batches
from onceflow.core.plan import OffsetRange, Plan
from onceflow_devkit.audit import clickstream_oracle as oracle

Source = tuple[str, int, int]  # topic, partition, offset


@dataclass
class OutputAudit:
    name: str
    records: int = 0
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0
    # Copies published again on purpose: a reprocessed interval into a republish=True sink.
    republished: int = 0
    # Batches two engines read differently (audit.table_readers): each a failure, naming its batch.
    disagreements: list[str] = field(default_factory=list)
    # Of ``records``: too large for the topic, published in the warehouse's withheld files instead.
    withheld: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.unexpected or self.disagreements)

    def note(self, text: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(text)


@dataclass
class AuditReport:
    pipeline: str
    committed_batches: int
    input_records: int
    valid: int
    malformed: int
    outputs: dict[str, OutputAudit]
    contiguity_errors: list[str]
    visibility: str
    table_readers: list[str] = field(default_factory=list)  # the engines that read the Iceberg tables

    @property
    def duplicates(self) -> int:
        return sum(o.duplicates for o in self.outputs.values())

    @property
    def missing(self) -> int:
        return sum(o.missing for o in self.outputs.values())

    @property
    def ok(self) -> bool:
        return not self.contiguity_errors and all(o.ok for o in self.outputs.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "pipeline": self.pipeline,
            "committed_batches": self.committed_batches,
            "input_records": self.input_records,
            "valid": self.valid,
            "malformed": self.malformed,
            "duplicates": self.duplicates,
            "missing": self.missing,
            "outputs": {name: {**asdict(o), "ok": o.ok} for name, o in self.outputs.items()},
            "contiguity_errors": self.contiguity_errors,
            "visibility": self.visibility,
            "table_readers": self.table_readers,
        }

    def summary(self) -> str:
        lines = [
            f"audit of {self.pipeline}: {'OK' if self.ok else 'FAILED'} — {self.committed_batches} committed batches, "
            f"{self.input_records} input records ({self.valid} valid, {self.malformed} malformed)",
        ]
        for o in self.outputs.values():
            lines.append(
                f"  {o.name:<20} {o.records:>8} records  duplicates {o.duplicates}  missing {o.missing}  unexpected {o.unexpected}"
                + (f"  republished {o.republished}" if o.republished else "")
                + (f"  (withheld, too large for the topic: {o.withheld})" if o.withheld else "")
                + (f"  e.g. {'; '.join(o.examples)}" if o.examples else "")
            )
            lines += [f"    readers disagree on {d}" for d in o.disagreements]
        lines += [f"  contiguity: {e}" for e in self.contiguity_errors]
        lines.append(f"  visibility: {self.visibility}")
        if self.table_readers:
            lines.append(f"  tables read by: {', '.join(self.table_readers)}")
        return "\n".join(lines)


def _read_records(config, rng: OffsetRange) -> Iterable[dict]:
    from onceflow.kafka.reader import read_range

    for batch in read_range(config, rng):
        yield from batch.to_pylist()


def _copies(plans: list[Plan], source: Source) -> int:
    """How many of ``plans`` read ``source``."""
    topic, partition, offset = source
    return sum(1 for p in plans for r in p.ranges if (r.topic, r.partition) == (topic, partition) and r.start <= offset < r.end)


def topic_ranges(config, topic: str) -> list[OffsetRange]:
    """Every partition of ``topic`` from its first record to its last stable offset."""
    from onceflow.kafka.offsets import KafkaOffsetSource

    with KafkaOffsetSource(config) as source:
        return source.topic_ranges(topic)


Written = dict[tuple[str, str, int], list[tuple[int, int]]]


def _committed_writes(statuses, sink: str) -> Written:
    """(batch id, split, partition) -> [first, last] offsets of each committed transaction of ``sink``.

    Splits interleave in a partition, so a committed record is one inside its
    own split's range *and* carrying that split's headers; earlier attempts of
    the split lie before the range.
    """
    from onceflow.sinks.kafka.handle import handles_of

    written: Written = {}
    for status in statuses:
        vote = status.decision.votes.get(sink) if status.decision else None
        if vote is None:
            continue
        for handle in handles_of(vote):
            for partition, write in handle.partitions.items():
                key = (handle.batch_id, str(handle.split), int(partition))
                written.setdefault(key, []).append((write.first_offset, write.last_offset))
    return written


def _written_by(written: Written, partition: int, record: dict) -> bool:
    identity = batch_and_split([(h["key"], h["value"]) for h in record["headers"] or ()])
    ranges = written.get((*identity, partition), ()) if identity else ()
    return any(first <= record["offset"] <= last for first, last in ranges)


def _source_of(value: dict, nested: bool) -> Source:
    src = value["source"] if nested else value
    return (str(src["topic"]), int(src["partition"]), int(src["offset"]))


def _withheld_values(runtime, sink: str) -> Iterable[tuple[str, bytes]]:
    """(file, value) of every record the commits published as withheld (too large for the topic)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from onceflow.config.warehouse_layout import pipeline_dir

    storage = runtime.storage
    root = f"{runtime.deployment.warehouse.rstrip('/')}/{pipeline_dir(runtime.spec.name)}/withheld/{sink}"
    for path in (f"{root}/{name}" for name in storage.list_tree(root)):
        for value in pq.read_table(pa.BufferReader(storage.read_bytes(path)), columns=["value"]).column("value").to_pylist():
            yield path, value


def _audit_topic(
    out: OutputAudit, config, topic: str, expected: Mapping[Source, int], nested_source: bool, committed: Written | None,
    withheld: Iterable[tuple[str, bytes]] = (),
) -> None:
    """Each expected source ``expected[source]`` times in ``topic`` and its ``withheld`` records: once,
    or once per committed batch that read it when the sink re-publishes reprocessed intervals."""
    seen: Counter[Source] = Counter()

    def count(value: bytes, where: str) -> None:
        out.records += 1
        try:
            seen[_source_of(json.loads(value), nested_source)] += 1
        except (ValueError, KeyError, TypeError):
            out.unexpected += 1
            out.note(f"{where} is not an output record of this pipeline")

    for rng in topic_ranges(config, topic):
        for rec in _read_records(config, rng):
            if committed is None or _written_by(committed, rng.partition, rec):
                count(rec["value"], f"{topic}[{rng.partition}]@{rec['offset']}")
    for path, value in withheld:
        out.withheld += 1
        count(value, f"a withheld record in {path}")
    _tally(out, seen, expected)


def _tally(out: OutputAudit, seen: Counter[Source], expected: Mapping[Source, int]) -> None:
    """Each source seen ``seen[source]`` times against the ``expected[source]`` times."""
    for source, count in seen.items():
        if source not in expected:
            out.unexpected += count
            out.note(f"{source} is outside the committed ranges")
        elif count > expected[source]:
            out.duplicates += count - expected[source]
            out.note(f"{source} appears {count} times, expected {expected[source]}")
        else:
            out.republished += count - 1
            if count < expected[source]:  # a reprocessed interval's records missing from a republish output
                out.missing += expected[source] - count
                out.note(f"{source} appears {count} times, expected {expected[source]}")
    for source in expected.keys() - seen.keys():
        out.missing += 1
        out.note(f"{source} is missing")


def _audit_views(out: OutputAudit, expected_views: Counter, table) -> None:
    """Per (page, window ms), the views in ``table`` (a pyarrow Table) against ``expected_views``."""
    got_views: Counter[tuple[str, int]] = Counter()
    if table.num_rows:
        for row in table.select(["page", "window_start", "views"]).to_pylist():
            window = row["window_start"]
            window_ms = int(window.timestamp() * 1000) if hasattr(window, "timestamp") else int(window)
            got_views[(row["page"], window_ms)] += int(row["views"])
            out.records += 1
    for key in expected_views.keys() | got_views.keys():
        diff = got_views[key] - expected_views[key]
        if diff > 0:
            if key in expected_views:
                out.duplicates += diff
            else:
                out.unexpected += diff
            out.note(f"{key}: {got_views[key]} views, expected {expected_views[key]}")
        elif diff < 0:
            out.missing += -diff
            out.note(f"{key}: {got_views[key]} views, expected {expected_views[key]}")


def _audit_table(runtime, sink, expected_views: Counter, committed: list, replaced: set,
                 readers: list[str], spark: bool) -> OutputAudit:
    """The table's rows as a reader sees them, and its history: one snapshot per committed
    batch and none of any other batch; current files only of committed, unreplaced batches.
    ``spark``: Spark reads it too, and must see what pyiceberg sees. Each engine that read the
    table is added to ``readers``."""
    import pyarrow as pa
    from pyiceberg.exceptions import NoSuchTableError

    from onceflow.sinks.iceberg import participant as iceberg_sink
    from onceflow.sinks.iceberg.tables import batch_key
    from onceflow_devkit.audit import table_readers
    from onceflow_devkit.services.iceberg_catalog import table_of

    out = OutputAudit(sink.name)
    try:
        table = table_of(runtime, sink.name)
    except NoSuchTableError:
        _audit_views(out, expected_views, pa.table({}))
        return out
    scanned = table.scan().to_arrow()
    _audit_views(out, expected_views, scanned)
    views = [table_readers.pyiceberg_view(table, scanned)]
    if spark:
        properties = runtime.deployment.catalog_properties(sink.catalog, f"sink {sink.name}")
        views.append(table_readers.spark_view(properties, sink.target))
        out.disagreements += table_readers.disagreements(*views, batch_of=lambda row: row.get("batch_id"))
    readers.extend(view.reader for view in views if view.reader not in readers)
    # (batch key, decided attempt) of every committed batch: the directory its files are in, and its snapshot.
    attempts = {batch_key(p.batch_seq, p.created_at_ms): status.decision.attempt for p, status in committed}
    snapshots = Counter(
        batch_key(int(s.summary[iceberg_sink.BATCH_KEY]), int(s.summary[iceberg_sink.PLANNED_AT_KEY]))
        for s in table.metadata.snapshots
        if s.summary[iceberg_sink.PIPELINE_KEY] == runtime.spec.name and s.summary[iceberg_sink.SINK_KEY] == sink.name
    )
    for key, count in snapshots.items():
        if key not in attempts:
            out.unexpected += count
            out.note(f"snapshot of batch {key}, which is not committed")
        elif count > 1:
            out.duplicates += count - 1
            out.note(f"batch {key} has {count} snapshots")
    for key in attempts.keys() - snapshots.keys():
        out.missing += 1
        out.note(f"committed batch {key} has no snapshot")
    live = {key: f"a{attempt}" for key, attempt in attempts.items() if int(key.split("-")[0]) not in replaced}
    for task in table.scan().plan_files():
        path = task.file.file_path
        key, attempt, *_ = path.split(f"/data/onceflow/{runtime.spec.name}/{sink.name}/", 1)[-1].split("/")
        if live.get(key) != attempt:
            out.unexpected += 1
            out.note(f"{path} is not of a committed batch's decided attempt (or of a replaced batch)")
    return out


def audit_table_rows(name: str, server, target: str, expected: Mapping[Source, int]) -> OutputAudit:
    """A PostgreSQL table output, read with plain SQL on ``server`` (services.postgres.PostgresServer):
    each row's source topic/partition/offset, counted against ``expected``."""
    from onceflow_postgres_sink.tables import table_sql
    from psycopg import sql

    out = OutputAudit(name)
    with server.connect(autocommit=True) as conn:
        rows = conn.execute(sql.SQL('SELECT topic, "partition", "offset" FROM {}').format(table_sql(target))).fetchall()
    out.records = len(rows)
    _tally(out, Counter((str(t), int(p), int(o)) for t, p, o in rows), expected)
    return out


def audit_clickstream(runtime, hides_aborted: bool = True, tables: Mapping[str, Any] | None = None,
                      spark_reads_tables: bool = False) -> AuditReport:
    """``tables``: the PostgreSQL server (services.postgres.PostgresServer) of each table output's
    connection id, read directly (``with_table``'s variant of the pipeline). ``spark_reads_tables``:
    Spark reads each Iceberg table too (its catalog must be a REST catalog; about 20-40 s a table,
    most of it Spark's start), and a batch it sees otherwise than pyiceberg fails the audit."""
    spec = runtime.spec
    config = runtime.deployment.kafka.config()
    committed = committed_plans(runtime.coordinator)
    statuses = [s for _, s in committed]
    # A reprocessed interval's batch replaces the committed one it names: the
    # input is counted once, from the replacement.
    replaced, _ = replaced_batches(runtime.coordinator, committed)
    plans = [p for p, _ in committed if p.batch_seq not in replaced]
    retired = [p for p, _ in committed if p.batch_seq in replaced]

    valid: dict[Source, dict] = {}
    malformed: dict[Source, str] = {}
    input_records = 0
    for plan in plans:
        for rng in plan.ranges:
            for rec in _read_records(config, rng):
                input_records += 1
                source = (rng.topic, rng.partition, rec["offset"])
                verdict = oracle.classify(rec["value"])
                if verdict.valid:
                    valid[source] = verdict.event
                else:
                    malformed[source] = verdict.reason

    outputs: dict[str, OutputAudit] = {}
    readers: list[str] = []  # of the Iceberg tables

    # Files and table: per (page, window) the committed views equal the valid events.
    from onceflow.sinks.files.reader import read_committed

    expected_views = Counter((e["page"], oracle.window_start_ms(e["ts"])) for e in valid.values())
    counts = OutputAudit("page_minute_counts")
    _audit_views(counts, expected_views, read_committed(runtime.sink_uri("page_minute_counts"), runtime.storage))
    outputs[counts.name] = counts
    for sink in spec.sinks:
        if sink.kind == "iceberg":
            outputs[sink.name] = _audit_table(runtime, sink, expected_views, committed, replaced, readers,
                                              spark_reads_tables)

    for sink_name, sources, nested in (
        ("clicks_enriched", set(valid), True),
        ("clicks_dead_letter", set(malformed), False),
    ):
        audit = OutputAudit(sink_name)
        expected = {source: 1 + (_copies(retired, source) if spec.sink(sink_name).republish else 0) for source in sources}
        committed = None if hides_aborted else _committed_writes(statuses, sink_name)
        _audit_topic(audit, config, spec.sink(sink_name).target, expected, nested, committed,
                     _withheld_values(runtime, sink_name))
        outputs[sink_name] = audit
    for sink in spec.sinks:
        if sink.kind == "postgres":
            server = (tables or {})[sink.options["connection"]]
            outputs[sink.name] = audit_table_rows(sink.name, server, sink.target, {source: 1 for source in valid})

    return AuditReport(
        pipeline=spec.name,
        committed_batches=len(plans),
        input_records=input_records,
        valid=len(valid),
        malformed=len(malformed),
        outputs=outputs,
        contiguity_errors=contiguity_errors(plans),
        visibility="read_committed consumer (broker hides aborted records)"
        if hides_aborted
        else "restricted to records written by committed transactions, by offset range and split headers (this broker shows aborted records)",
        table_readers=readers,
    )
