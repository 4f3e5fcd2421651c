"""The conformance kit (onceflow.testing.conformance) on the built-in kinds, on their real storage.

The postgres kind of examples/ runs it in tests/integration/examples/test_postgres_sink.py.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from onceflow.files import layout
from onceflow.files.staged_writer import write_staged_parquet
from onceflow.sinks import sink_kind
from onceflow.spec import FILES, PipelineSpec, SinkSpec
from onceflow.storage import storage_for
from onceflow.testing.conformance import SinkConformance

SCHEMA = pa.schema([("key", pa.string()), ("value", pa.int64())])


class FilesHarness:
    """A file sink under a local warehouse: Parquet staged split by split as its Spark tasks stage it,
    read back as any Parquet reader of the output's directory would."""

    def __init__(self, warehouse: str):
        self.pipeline = f"p{uuid.uuid4().hex[:8]}"
        self.sink = SinkSpec("counts", FILES, f"{self.pipeline}/counts", splits=2)
        self.kind = sink_kind(FILES)
        self.root = self.kind.location(self.sink, warehouse)
        self.spec = PipelineSpec(self.pipeline, ("t",), "m:f", (self.sink,))
        self.warehouse = warehouse

    def participant(self):
        from onceflow.runtime import Deployment

        return self.kind.participant(self.spec, self.sink, Deployment(self.warehouse, kafka=None))

    def pre_commit(self, batch_seq, attempt, rows, replaces=None):
        participant = self.participant()
        entries = [write_staged_parquet([pa.RecordBatch.from_pylist(list(rows[i::self.sink.splits]), SCHEMA)],
                                        participant.staging_uri(batch_seq, attempt), split=i, storage=participant.storage)
                   for i in range(self.sink.splits)]
        return participant.vote_for(batch_seq, attempt, [e for e in entries if e is not None], replaces=replaces)

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
