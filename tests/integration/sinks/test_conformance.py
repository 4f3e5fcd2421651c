"""The conformance kit (onceflow.testing.conformance) on the built-in kinds, on their real storage.

The postgres kind of examples/ runs it in tests/integration/examples/test_postgres_sink.py.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from onceflow.sinks.files import layout
from onceflow.sinks import sink_kind
from onceflow.core.participant import Vote
from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.pipeline.runtime import Deployment
from onceflow.pipeline.spec import FILES, ICEBERG, KAFKA, PipelineSpec, SinkSpec
from onceflow.storage import storage_for
from onceflow.storage.base import PendingStorage
from onceflow.core.plan import AT_LEAST_ONCE, EXACTLY_ONCE, NO_GUARANTEE, SinkPlan
from onceflow.testing.conformance import (
    AtLeastOnceConformance, Held, NoGuaranteeConformance, SinkConformance, SparkSideConformance, planned_at_ms,
)

SCHEMA = pa.schema([("key", pa.string()), ("value", pa.int64())])
# A deployment names a Kafka cluster, which a files or Iceberg output never asks.
NO_KAFKA = KafkaCluster("127.0.0.1:9")


class FilesHarness:
    """A file sink under a local warehouse: Parquet staged split by split as its Spark tasks stage it,
    read back as any Parquet reader of the output's directory would."""

    def __init__(self, warehouse: str):
        self.pipeline = f"p{uuid.uuid4().hex[:8]}"
        self.sink = SinkSpec("counts", FILES, f"{self.pipeline}/counts", splits=2)
        self.kind = sink_kind(FILES)
        self.root = self.kind.location(self.sink, warehouse)
        self.spec = PipelineSpec(self.pipeline, ("t",), "m:f", (self.sink,))
        self.deployment = Deployment(warehouse, NO_KAFKA)

    def participant(self):
        return self.kind.participant(self.spec, self.sink, self.deployment)

    def frame(self, spark, rows):
        return spark.createDataFrame(rows, "key string, value bigint")

    def pre_commit(self, batch_seq, attempt, rows, replaces=None, task_attempt=0):
        participant = self.participant()
        entries = [participant.stage([pa.RecordBatch.from_pylist(list(rows[i::self.sink.splits]), SCHEMA)],
                                     batch_seq, attempt, split=i, task_attempt=task_attempt)
                   for i in range(self.sink.splits)]
        return participant.vote_for(batch_seq, attempt, [e for e in entries if e is not None], replaces=replaces)

    def held(self, batch_seq):
        storage = storage_for(self.root)
        staging = layout.batch_staging(self.root, batch_seq)
        held = [Held(f"staged file {layout.join(staging, path)}") for path in storage.list_tree(staging)]
        if isinstance(storage, PendingStorage):
            held += [Held(f"pending upload {name}") for name in storage.pending_names(layout.batch_dir(self.root, batch_seq))]
        return held

    def job_failed(self, vote):
        storage = storage_for(self.root)
        for entry in vote.payload["files"]:
            storage.delete(entry["path"])

    def visible(self):
        storage = storage_for(self.root)
        rows = []
        for name in sorted(storage.list_dir(self.root)):
            seq = layout.seq_of_batch_dir(name)
            if seq is None:
                continue
            directory = layout.batch_dir(self.root, seq)
            for file in sorted(n for n in storage.list_dir(directory) if not n.startswith(("_", "."))):
                table = pq.read_table(layout.join(directory, file).removeprefix("file://"))
                rows += [(layout.batch_id(seq), k, v) for k, v in zip(table["key"].to_pylist(), table["value"].to_pylist())]
        return rows


class TestFilesSinkConformance(SinkConformance):
    @pytest.fixture
    def sink_harness(self, tmp_path):
        return FilesHarness(f"file://{tmp_path}/warehouse")


class TestFilesSparkSide(SparkSideConformance):
    sink_harness = TestFilesSinkConformance.sink_harness


class KafkaHarness:
    """A kafka sink on the test broker (each record's value is ``key=value``): each split's transaction opened, written and left open as its
    Spark task leaves it (a retried attempt first fences the batch's ids, as the kind's pre_commit
    does), read back by a read_committed consumer by the batch its records' headers name."""

    PARTITIONS = 3

    def __init__(self, broker, warehouse: str, guarantee: str = EXACTLY_ONCE):
        from tests.integration.kafka.helpers import create_topic

        self.broker, self.warehouse = broker, warehouse
        self.pipeline = f"p{uuid.uuid4().hex[:8]}"
        self.topic = create_topic(broker.config(), partitions=self.PARTITIONS, prefix="kit")
        self.sink = SinkSpec("out", KAFKA, self.topic, splits=2, guarantee=guarantee)
        self.spec = PipelineSpec(self.pipeline, ("t",), "m:f", (self.sink,))
        self.deployment = Deployment(warehouse, broker)

    def participant(self):
        return sink_kind(KAFKA).participant(self.spec, self.sink, self.deployment)

    def frame(self, spark, rows):
        """What a transform hands a Kafka sink: binary key and value (here ``key=value``, as ``visible`` reads it)."""
        return spark.createDataFrame([(str(r["key"]).encode(), f"{r['key']}={r['value']}".encode()) for r in rows],
                                     "key binary, value binary")

    def pre_commit(self, batch_seq, attempt, rows, replaces=None, task_attempt=0):
        from onceflow.sinks.kafka.handle import vote_payload
        from onceflow.sinks.kafka.writer import DirectSplitWriter, TransactionalSplitWriter
        from onceflow.sinks.kafka.staged import staged_uri

        batch_id = layout.batch_id(batch_seq)
        transactional = self.sink.guarantee == EXACTLY_ONCE
        sink_kind(KAFKA).fence_earlier_attempts(self.broker.config(), self.sink_plan(batch_seq), attempt)
        handles = []
        for split in range(self.sink.splits):
            part = list(rows[split::self.sink.splits])
            # The data source tags a staged copy with Spark's task attempt id, unique in the application.
            where = (self.broker.config(), self.pipeline, "out", batch_id, split, self.topic,
                     staged_uri(self.warehouse, self.pipeline, "out", batch_id, split, f"{attempt}-{task_attempt}"))
            writer = (TransactionalSplitWriter(*where) if transactional
                      else DirectSplitWriter(*where, guarantee=self.sink.guarantee))
            writer.begin()
            writer.write_batch(pa.RecordBatch.from_pydict({
                "key": pa.array([str(r["key"]).encode() for r in part], pa.binary()),
                "value": pa.array([f"{r['key']}={r['value']}".encode() for r in part], pa.binary())}))
            handles.append(writer.precommit())
        return Vote("out", batch_seq, attempt, vote_payload(handles), records=sum(h.records for h in handles),
                    replaces=replaces)

    def sink_plan(self, batch_seq):
        plan = SinkPlan("out", KAFKA, self.sink.splits, guarantee=self.sink.guarantee)
        return dataclasses.replace(plan, transactional_ids=sink_kind(KAFKA).transactional_ids(self.pipeline, plan, batch_seq))

    def held(self, batch_seq):
        """The batch's staged copies, and its transactions still open as their coordinators describe them
        (the splits' and their repairs'), which the broker aborts within the transaction timeout; a broker
        that does not describe transactions (docs/brokers.md) shows the staged copies alone."""
        from onceflow.config.warehouse_layout import kafka_staging_dir
        from onceflow.sinks.kafka.ids import repair_id
        from onceflow.sinks.kafka.coordinators import describe_transactions, TransactionState

        staging = kafka_staging_dir(self.warehouse, self.pipeline, "out", layout.batch_id(batch_seq))
        held = [Held(f"staged copy {staging}/{path}") for path in storage_for(staging).list_tree(staging)]
        if not self.broker.broker.describes_transactions:
            return held
        ids = self.sink_plan(batch_seq).transactional_ids
        views = describe_transactions(self.broker.config(), [*ids, *map(repair_id, ids)])
        timeout = timedelta(milliseconds=self.sink.transaction_timeout_ms)
        return held + [Held(f"open transaction {txn_id} ({view})", ends_within=timeout)
                       for txn_id, view in sorted(views.items()) if view.state is TransactionState.ONGOING]

    def aged(self, vote, by):
        from onceflow.sinks.kafka.handle import handles_of, vote_payload

        older = [dataclasses.replace(h, first_write_ms=h.first_write_ms - int(by.total_seconds() * 1000)) for h in handles_of(vote)]
        return dataclasses.replace(vote, payload=vote_payload(older))

    def job_failed(self, vote):
        from onceflow.sinks.kafka.fencing import fence_transactional_ids
        from onceflow.sinks.kafka.handle import handles_of

        fence_transactional_ids(self.broker.config(), [h.transactional_id for h in handles_of(vote)])

    def visible(self):
        from onceflow.sinks.kafka.headers import batch_and_split
        from tests.integration.kafka.helpers import read_committed

        rows = []
        for _, record, headers in read_committed(self.broker.config(), self.topic, self.PARTITIONS):
            key, _, value = record.decode().partition("=")  # the value carries its row's key (harness's encoding)
            rows.append((batch_and_split(headers)[0], key, int(value)))
        return rows


class TestKafkaSinkConformance(SinkConformance):
    @pytest.fixture
    def sink_harness(self, one_kafka_broker, tmp_path):
        return KafkaHarness(one_kafka_broker, f"file://{tmp_path}/warehouse")


class TestKafkaSparkSide(SparkSideConformance):
    sink_harness = TestKafkaSinkConformance.sink_harness


class TestKafkaSinkAtLeastOnce(AtLeastOnceConformance):
    @pytest.fixture
    def sink_harness(self, one_kafka_broker, tmp_path):
        return KafkaHarness(one_kafka_broker, f"file://{tmp_path}/warehouse", guarantee=AT_LEAST_ONCE)


class TestKafkaSinkNoGuarantee(NoGuaranteeConformance):
    @pytest.fixture
    def sink_harness(self, one_kafka_broker, tmp_path):
        return KafkaHarness(one_kafka_broker, f"file://{tmp_path}/warehouse", guarantee=NO_GUARANTEE)


def test_a_kafka_commit_held_back_by_an_earlier_batchs_open_transaction_says_so_and_finishes_once_it_ends(
        one_kafka_broker, tmp_path):
    """Not a dropped marker (docs/brokers.md, "Hanging transactions"): the later batch is committed and
    its markers written, but the earlier batch's open transactions hold the partitions' stable end."""
    from onceflow.core.participant import Outcome
    from onceflow.testing.conformance import rows_of

    harness = KafkaHarness(one_kafka_broker, f"file://{tmp_path}/warehouse")
    first, second = harness.pre_commit(1, 1, rows_of(1, 1)), harness.pre_commit(2, 1, rows_of(2, 1))
    participant = harness.participant()
    held = participant.commit(second)
    assert held.outcome is Outcome.RETRY_LATER, held.detail
    assert "another transaction still open in the partition holds its records back" in held.detail, held.detail
    assert f"producer {first.payload['handles'][0]['producer_id']} since offset" in held.detail, held.detail
    assert participant.commit(first).outcome is Outcome.DONE
    assert participant.commit(second).outcome is Outcome.ALREADY_DONE
    assert sorted(b for b, _, _ in harness.visible()) == ["0000000001"] * 12 + ["0000000002"] * 12


class IcebergHarness:
    """An Iceberg table in pyiceberg's SQL catalog (SQLite) over a local warehouse: data files written
    split by split with pyiceberg's writer, as the Spark tasks write them; read back as any engine
    reads the table's current snapshot, each live data file by the snapshot that added it."""

    def __init__(self, tmp_path):
        from onceflow.sinks.iceberg import tables
        from onceflow_devkit.services.iceberg_catalog import CONN_ID, catalog_properties

        self.pipeline = f"p{uuid.uuid4().hex[:8]}"
        self.properties = catalog_properties(tmp_path / "catalog", f"file://{tmp_path}/lake")
        self.sink = SinkSpec("t", ICEBERG, f"ns_{self.pipeline}.t", splits=2, catalog=CONN_ID)
        self.spec = PipelineSpec(self.pipeline, ("t",), "m:f", (self.sink,))
        self.catalog = tables.open_catalog(CONN_ID, self.properties)
        tables.prepared_table(self.catalog, self.sink.target, SCHEMA, (), "conformance table")
        self.deployment = Deployment(f"file://{tmp_path}/warehouse", NO_KAFKA, None, {self.sink.catalog: self.properties})

    def participant(self):
        return sink_kind(ICEBERG).participant(self.spec, self.sink, self.deployment)

    def frame(self, spark, rows):
        return spark.createDataFrame(rows, "key string, value bigint")

    def pre_commit(self, batch_seq, attempt, rows, replaces=None, task_attempt=0):
        from onceflow.sinks.iceberg import tables

        table, planned_at = self.catalog.load_table(self.sink.target), planned_at_ms(batch_seq)
        files = [f for i in range(self.sink.splits) for f in tables.write_data_files(
            table, self.pipeline, self.sink.name, batch_seq, planned_at, attempt,
            [pa.RecordBatch.from_pylist(list(rows[i::self.sink.splits]), SCHEMA)])]
        return self.participant().vote_for(batch_seq, planned_at, attempt, table.location(), files, replaces=replaces)

    def held(self, batch_seq):
        """Files under the batch's directory that no snapshot of the table added: a reader never sees them,
        and only onceflow, or a table's orphan file removal, deletes them."""
        from onceflow.sinks.iceberg import tables
        from onceflow.sinks.iceberg.participant import _files_added_by, _list_files

        table = self.catalog.load_table(self.sink.target)
        added = {f.file_path for s in table.metadata.snapshots for f in _files_added_by(table, s)}
        where = tables.batch_dir(table.location(), self.pipeline, self.sink.name, batch_seq, planned_at_ms(batch_seq))
        return [Held(f"data file {path}") for path in _list_files(table.io, where) if path not in added]

    def job_failed(self, vote):
        pass  # the data source's abort leaves the files to the rollback, which deletes the batch's directory

    def visible(self):
        from onceflow.sinks.iceberg.participant import BATCH_KEY

        table = self.catalog.load_table(self.sink.target)
        if table.current_snapshot() is None:
            return []
        batch_of = {s.snapshot_id: s.summary[BATCH_KEY] for s in table.metadata.snapshots}
        rows = []
        for entry in table.inspect.entries().to_pylist():
            if entry["status"] != 2:  # 2: DELETED, no longer in the table
                data = pq.read_table(entry["data_file"]["file_path"].removeprefix("file://"))
                rows += [(batch_of[entry["snapshot_id"]], k, v) for k, v in zip(data["key"].to_pylist(), data["value"].to_pylist())]
        return rows


class TestIcebergSinkConformance(SinkConformance):
    @pytest.fixture
    def sink_harness(self, tmp_path):
        return IcebergHarness(tmp_path)


class TestIcebergSparkSide(SparkSideConformance):
    sink_harness = TestIcebergSinkConformance.sink_harness
