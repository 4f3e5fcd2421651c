"""What committing a batch costs as the batch grows, on S3: the Parquet sink's commit of pending
uploads (what it does on S3), the same sink promoting staged files by copy (what it does
elsewhere, and did on S3 before), and the Iceberg sink.

    .venv/bin/python benchmarks/table_commit.py [--sizes-mb 10 1000] [--files 8] [--repeat 3]

Starts its own embedded S3 (moto over HTTP on 127.0.0.1) and SQLite catalog.
For each size, ``--repeat`` rounds: the same incompressible rows are written
as ``--files`` data files of one batch to both outputs on that S3 (the
pre-commit, not timed), then each output's commit is timed:

- files: ``FileSink.commit`` of files written as pending multipart uploads at
  their committed names (``FileSink.stage``): one CompleteMultipartUpload per
  file, size check, ``_SUCCESS`` manifest, what is still pending aborted;
- files, staged and copied: the same commit of files staged under ``_staging``
  (``write_staged_parquet`` without a pending directory): a server-side copy of
  every file into the batch directory, then the same steps;
- iceberg: ``IcebergTableSink.commit``: one append snapshot referencing the
  files where they were written (manifest, manifest list, metadata file,
  catalog row), then the unvoted files of the batch deleted.

Prints, per size and output, the median commit time, the S3 requests one
commit sent (by operation) and the bytes it had S3 copy server-side, then the
largest batch's figures over the smallest's (target: flat in bytes). The same
file count at every size isolates the cost of bytes. moto completes an upload
by joining its parts in memory, so its wall time grows with the bytes whatever
the client sends: the requests and copied bytes are what a real S3 bills and
waits on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from collections import Counter
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


class Requests:
    """The S3 operations a client sends, by name, and the bytes its copies ask S3 to move."""

    def __init__(self, client, sizes: dict[str, int]):
        self.sizes, self.sent, self.copied = sizes, Counter(), 0
        client.meta.events.register("before-call.s3.*", self._count)
        for operation in ("CopyObject", "UploadPartCopy"):
            client.meta.events.register(f"provide-client-params.s3.{operation}", self._copy)

    def _count(self, model, **_):
        self.sent[model.name] += 1

    def _copy(self, params, **_):
        if "CopySourceRange" in params:  # one part of a multipart copy: "bytes=first-last"
            first, last = params["CopySourceRange"].removeprefix("bytes=").split("-")
            self.copied += int(last) - int(first) + 1
            return
        source = params["CopySource"]
        key = source["Key"] if isinstance(source, dict) else source.split("/", 1)[1]
        self.copied += self.sizes.get(key, 0)

    def reset(self, sizes: dict[str, int]) -> None:
        self.sizes, self.sent, self.copied = sizes, Counter(), 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[10, 1000])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from onceflow.sinks.files import FileSink, write_staged_parquet
    from onceflow.sinks.iceberg import tables
    from onceflow.sinks.iceberg.participant import IcebergTableSink
    from onceflow.storage.s3 import S3Storage, split_uri
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
    counted = Requests(storage.client, {})
    results = []
    seq = 0
    try:
        for size in args.sizes_mb:
            data = rows(size, args.files, seed=int(size))
            schema = data[0].schema
            table = tables.prepared_table(catalog, f"bench.t{int(size)}", schema, (), "bench table")
            files_s, copy_s, iceberg_s, written, sent = [], [], [], 0, {}
            for _ in range(args.repeat):
                for way, times in (("files", files_s), ("files_copy", copy_s)):
                    seq += 1
                    sink_uri = f"s3://{bucket}/{way}/t{int(size)}"
                    file_sink = FileSink("bench", sink_uri, storage)
                    if way == "files":
                        entries = [file_sink.stage(t, seq, 1, i) for i, t in enumerate(data)]
                    else:
                        entries = [write_staged_parquet(t, file_sink.staging_uri(seq, 1), i, storage) for i, t in enumerate(data)]
                    written = sum(e.size for e in entries)
                    vote = file_sink.vote_for(seq, 1, entries)
                    counted.reset({split_uri(e.path)[1]: e.size for e in entries})
                    seconds, result = timed(lambda: file_sink.commit(vote))
                    assert result.ok, result.detail
                    times.append(seconds)
                    sent[way] = {"requests": dict(sorted(counted.sent.items())), "bytes_copied": counted.copied}
                    storage.delete_tree(sink_uri)  # frees moto's memory: the committed bytes are not needed any more

                table_sink = IcebergTableSink("bench", "bench", f"bench.t{int(size)}", CONN_ID, properties)
                table = catalog.load_table(f"bench.t{int(size)}")
                encoded = [f for t in data for f in tables.write_data_files(table, "bench", "bench", seq, 0, 1, t.to_batches())]
                vote = table_sink.vote_for(seq, 0, 1, table.location(), encoded)
                seconds, result = timed(lambda: table_sink.commit(vote))
                assert result.ok, result.detail
                iceberg_s.append(seconds)
                storage.delete_tree(tables.batch_dir(table.location(), "bench", "bench", seq, 0))
            results.append({"size_mb": size, "bytes": written, "files": args.files,
                            "files_commit_s": round(statistics.median(files_s), 3),
                            "files_commit": sent["files"],
                            "files_copy_commit_s": round(statistics.median(copy_s), 3),
                            "files_copy_commit": sent["files_copy"],
                            "iceberg_commit_s": round(statistics.median(iceberg_s), 3)})
            print(json.dumps(results[-1]), flush=True)
        small, large = results[0], results[-1]
        print(json.dumps({
            "bytes_ratio": round(large["bytes"] / small["bytes"], 1),
            "files_requests_large_over_small": round(sum(large["files_commit"]["requests"].values())
                                                     / sum(small["files_commit"]["requests"].values()), 2),
            "files_bytes_copied": [small["files_commit"]["bytes_copied"], large["files_commit"]["bytes_copied"]],
            "files_time_large_over_small": round(large["files_commit_s"] / small["files_commit_s"], 2),
            "files_copy_time_large_over_small": round(large["files_copy_commit_s"] / small["files_copy_commit_s"], 2),
            "iceberg_time_large_over_small": round(large["iceberg_commit_s"] / small["iceberg_commit_s"], 2),
            "target": "files: requests and bytes copied flat in bytes",
        }))
    finally:
        proc.stop(grace=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
