"""What committing a batch costs as the batch grows: the Iceberg sink vs the S3 Parquet sink.

    .venv/bin/python benchmarks/table_commit.py [--sizes-mb 10 1000] [--files 8] [--repeat 3]

Starts its own embedded S3 (moto over HTTP on 127.0.0.1) and SQLite catalog.
For each size, ``--repeat`` rounds: the same incompressible rows are written
as ``--files`` data files of one batch to both outputs on that S3 (the
pre-commit, not timed), then each output's commit is timed:

- files: ``FileSink.commit``: server-side copy of every staged file into the
  batch directory, size check, ``_SUCCESS`` manifest, staging deleted;
- iceberg: ``IcebergTableSink.commit``: one append snapshot referencing the
  files where they were written (manifest, manifest list, metadata file,
  catalog row), then the unvoted files of the batch deleted.

Prints the median commit time per size and output, and the two ratios the
issue sets: the Iceberg commit of the largest batch over that of the
smallest (target: at most 2 for 100x the bytes), and Iceberg over files per
size. The same file count at every size isolates the cost of bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path


def rows(megabytes: float, files: int, seed: int):
    """``files`` Arrow tables of ~``megabytes`` in all, of random (incompressible) 1 KiB values."""
    import numpy as np
    import pyarrow as pa

    per_file = max(1, int(megabytes * 1024 * 1024 / files / 1024))
    rng = np.random.default_rng(seed)
    out = []
    for f in range(files):
        blob = rng.bytes(per_file * 1024)
        values = pa.array([blob[i * 1024:(i + 1) * 1024] for i in range(per_file)], pa.binary())
        out.append(pa.table({"split": pa.array([f] * per_file, pa.int64()), "payload": values}))
    return out


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[10, 1000])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from onceflow.sinks.files import FileSink, write_staged_parquet
    from onceflow.sinks.iceberg import tables
    from onceflow.sinks.iceberg.participant import IcebergTableSink
    from onceflow.storage.s3 import S3Storage
    from onceflow_devkit.services.iceberg_catalog import CONN_ID, catalog_properties
    from onceflow_devkit.services.process import ManagedProcess
    from onceflow_devkit.services.s3 import start_moto

    work = Path(tempfile.mkdtemp(prefix="onceflow-bench-table-"))
    proc = ManagedProcess("bench-s3", work / "s3").reset()
    s3 = start_moto(proc, die_with_parent=True)
    os.environ.update({k: v for k, v in s3.env().items() if v})
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    s3.client().create_bucket(Bucket=bucket)
    properties = catalog_properties(work / "catalog", f"s3://{bucket}/lake", s3)
    catalog = tables.open_catalog(CONN_ID, properties)
    storage = S3Storage(s3)
    results = []
    seq = 0
    try:
        for size in args.sizes_mb:
            data = rows(size, args.files, seed=int(size))
            schema = data[0].schema
            table = tables.prepared_table(catalog, f"bench.t{int(size)}", schema, (), "bench table")
            files_s, iceberg_s, written = [], [], 0
            for _ in range(args.repeat):
                seq += 1
                sink_uri = f"s3://{bucket}/files/t{int(size)}"
                file_sink = FileSink("bench", sink_uri, storage)
                entries = [write_staged_parquet(t, file_sink.staging_uri(seq, 1), i, storage) for i, t in enumerate(data)]
                written = sum(e.size for e in entries)
                seconds, result = timed(lambda: file_sink.commit(file_sink.vote_for(seq, 1, entries)))
                assert result.ok, result.detail
                files_s.append(seconds)

                table_sink = IcebergTableSink("bench", "bench", f"bench.t{int(size)}", CONN_ID, properties)
                table = catalog.load_table(f"bench.t{int(size)}")
                encoded = [f for t in data for f in tables.write_data_files(table, "bench", "bench", seq, 0, 1, t.to_batches())]
                vote = table_sink.vote_for(seq, 0, 1, table.location(), encoded)
                seconds, result = timed(lambda: table_sink.commit(vote))
                assert result.ok, result.detail
                iceberg_s.append(seconds)
                # Free moto's memory: the committed bytes are not needed any more.
                storage.delete_tree(sink_uri)
                storage.delete_tree(tables.batch_dir(table.location(), "bench", "bench", seq, 0))
            results.append({"size_mb": size, "bytes": written, "files": args.files,
                            "files_commit_s": round(statistics.median(files_s), 3),
                            "iceberg_commit_s": round(statistics.median(iceberg_s), 3),
                            "iceberg_over_files": round(statistics.median(iceberg_s) / statistics.median(files_s), 3)})
            print(json.dumps(results[-1]), flush=True)
        small, large = results[0], results[-1]
        print(json.dumps({
            "bytes_ratio": round(large["bytes"] / small["bytes"], 1),
            "iceberg_large_over_small": round(large["iceberg_commit_s"] / small["iceberg_commit_s"], 2),
            "files_large_over_small": round(large["files_commit_s"] / small["files_commit_s"], 2),
            "target": "iceberg_large_over_small <= 2",
        }))
    finally:
        proc.stop(grace=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
