"""write_staged_parquet: what the vote says about a file is what is on disk."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.parquet as pq

from onceflow.storage.local import LocalStorage
from onceflow.sinks.files.staged_writer import write_staged_parquet


def test_small_batches_become_few_row_groups_and_the_entry_describes_the_file(tmp_path):
    table = pa.table({"i": list(range(25_000)), "s": [f"v{i}" for i in range(25_000)]})
    entry = write_staged_parquet(iter(table.to_batches(max_chunksize=1_000)), str(tmp_path / "stage"), split=3,
                                 storage=LocalStorage(), task_attempt=2, row_group_rows=10_000)
    data = (tmp_path / "stage" / entry.name).read_bytes()
    assert (entry.size, entry.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert (entry.rows, entry.split, entry.task_attempt) == (25_000, 3, 2)
    assert entry.name.startswith("part-00003-") and entry.path == f"{tmp_path}/stage/{entry.name}"
    parquet = pq.ParquetFile(tmp_path / "stage" / entry.name)
    assert parquet.metadata.num_row_groups == 3
    assert parquet.read().equals(table)


def test_an_empty_partition_stages_nothing_and_attempts_never_collide(tmp_path):
    storage = LocalStorage()
    assert write_staged_parquet(iter([]), str(tmp_path / "stage"), 0, storage) is None
    table = pa.table({"i": [1, 2]})
    first = write_staged_parquet(table, str(tmp_path / "stage"), 0, storage)
    second = write_staged_parquet(table, str(tmp_path / "stage"), 0, storage, task_attempt=1)
    assert first.name != second.name
    assert sorted(p.name for p in (tmp_path / "stage").iterdir()) == sorted([first.name, second.name])
