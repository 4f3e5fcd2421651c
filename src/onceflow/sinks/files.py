"""The ``files`` sink kind: Parquet staged under ``<sink>/_staging/``, published
with a ``_SUCCESS`` manifest (``onceflow.files``)."""

from __future__ import annotations

from typing import Any, Mapping

from ..files.sink import FileSink


# The Spark data source that pre-commits this kind (onceflow.spark.file_sink registers it).
FORMAT = "onceflow_files"


class FilesKind:
    name = "files"
    data_source = "onceflow.spark.file_sink"

    def location(self, sink, warehouse: str) -> str:
        return "/".join([warehouse.rstrip("/"), sink.target.strip("/")])

    def asset_uri(self, sink, warehouse: str) -> str:
        return self.location(sink, warehouse)

    def transactional_ids(self, pipeline: str, sink, slot: int | None = None) -> tuple[str, ...]:
        return ()

    def reprocess(self, sink) -> str:
        return "replaced"  # the replacing batch's manifest names the batch it retracts (files.sink)

    def vote_lifetime(self, sink):
        return None  # staged files wait for the commit as long as it takes

    def check(self, sink, deployment) -> None:
        return None  # the storage says what is wrong when it is reached

    def open_transactions(self, sink, vote) -> list:
        return []  # staged files hold no transaction

    def participant(self, pipeline, sink, deployment) -> FileSink:
        return FileSink(sink.name, self.location(sink, deployment.warehouse), storage=deployment.storage())

    def pre_commit(self, frame: Any, sink, sink_plan, deployment, job_options: Mapping[str, str]) -> None:
        options = {**job_options, "path": self.location(sink, deployment.warehouse), **deployment.storage_options()}
        frame.write.format(FORMAT).mode("append").options(**options).save()


FILES = FilesKind()
