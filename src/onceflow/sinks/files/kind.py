"""The ``files`` sink kind: Parquet staged under ``<sink>/_staging/``, published
with a ``_SUCCESS`` manifest (``onceflow.sinks.files``)."""

from __future__ import annotations

from typing import Any, Mapping

from onceflow.sinks.files.participant import FileSink
from onceflow.sinks.api import SinkKind, CommittedOutput, committed_parquet
from onceflow.storage import warehouse_storage, warehouse_storage_options
from onceflow.sinks.files import layout
from onceflow.sinks.files.entries import Manifest


# The Spark data source that pre-commits this kind (onceflow.sinks.files.data_source registers it).
FORMAT = "onceflow_files"


class FilesKind(SinkKind):
    name = "files"
    data_source = "onceflow.sinks.files.data_source"

    def location(self, sink, warehouse: str) -> str:
        return "/".join([warehouse.rstrip("/"), sink.target.strip("/")])

    def asset_uri(self, sink, warehouse: str) -> str:
        return self.location(sink, warehouse)

    def reprocess(self, sink) -> str:
        return "replaced"  # the replacing batch's manifest names the batch it retracts (participant.py)

    def vote_lifetime(self, sink):
        return None  # staged files wait for the commit as long as it takes

    def participant(self, pipeline, sink, deployment) -> FileSink:
        return FileSink(sink.name, self.location(sink, deployment.warehouse), storage=warehouse_storage(deployment))

    def pre_commit(self, frame: Any, sink, sink_plan, deployment, job_options: Mapping[str, str]) -> None:
        options = {**job_options, "path": self.location(sink, deployment.warehouse), **warehouse_storage_options(deployment)}
        frame.write.format(FORMAT).mode("append").options(**options).save()

    def committed_output(self, spark, sink, pipeline, deployment, scope):
        """Every Parquet file a reader of the output's directory sees, by ``batch=`` directory, and
        each directory checked against its ``_SUCCESS`` manifest."""
        storage, root = warehouse_storage(deployment), self.location(sink, deployment.warehouse)
        files, findings = [], []
        for name in sorted(storage.list_dir(root)):
            seq = layout.seq_of_batch_dir(name)
            if seq is None or not scope.covers(layout.batch_id(seq)):
                continue
            directory = layout.batch_dir(root, seq)
            # Hidden names (_SUCCESS, .crc) are skipped by Spark, Hive and pyarrow readers alike.
            present = {n: size for n, size in storage.list_dir(directory).items()
                       if size is not None and not n.startswith(("_", "."))}
            manifest = storage.read_bytes(layout.manifest_path(root, seq))
            if manifest is None:
                if present:
                    findings.append(f"{directory}: {len(present)} file(s) and no {layout.MANIFEST_NAME} manifest: "
                                    "the batch is not committed, yet readers of the directory see its rows")
            else:
                listed = {f["name"]: f["size"] for f in Manifest.from_bytes(manifest).files}
                findings += [f"{directory}/{n}: listed in the batch's manifest and gone" for n in sorted(listed.keys() - present.keys())]
                findings += [f"{directory}/{n}: in the batch's directory and not in its manifest" for n in sorted(present.keys() - listed.keys())]
                findings += [f"{directory}/{n}: {present[n]} bytes, the manifest says {listed[n]}: changed since its commit"
                             for n in sorted(present.keys() & listed.keys()) if present[n] != listed[n]]
            files += [[layout.join(directory, n), layout.batch_id(seq)] for n in sorted(present)]
        frame = committed_parquet(spark, files, scope.schema, warehouse_storage_options(deployment)) if files else None
        return CommittedOutput(frame, tuple(findings), f"the Parquet files in {root}/batch=<id>/, as any reader sees them")


FILES = FilesKind()
