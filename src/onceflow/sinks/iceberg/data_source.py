"""``onceflow_iceberg``: a Spark Python data source that pre-commits an Iceberg table's data files.

On the sinks' data-source base (``onceflow.sinks.data_source_base``: the call
sequence, the options, the vote), a task attempt writes its split's rows as
Parquet data files of the table (one per table partition) under the attempt's
own directory, a fresh file name per task attempt, and returns their metadata
and statistics; the vote lists the files of the attempts Spark took. A failed
job's abort does nothing: the rollback's ``IcebergTableSink.abort`` deletes the
batch's directory, files of failed tasks included.

The files are written by pyiceberg's own writer (field ids, the table's
Parquet settings and partitioning), from the table's metadata file as the
driver saw it (``metadata_location``): executors need storage access only,
never the catalog. No snapshot references them until the commit task's.

Options: ``pipeline``, ``deployment`` (``Deployment.to_option()``: the
ledger, and the catalog's public properties), ``sink``, ``catalog``,
``table``, ``metadata_location``, ``io_properties`` (the public part of the
FileIO settings the catalog gave the driver's table, e.g. a REST catalog's
endpoint overrides), ``batch_seq``, ``planned_at_ms``, ``attempt``;
``replaces`` for a batch that reprocesses a committed interval. Credentials
the catalog vends to the driver do not reach executors: they use the
catalog's secrets from their own environment, or their own credential chain.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from pyspark.sql.datasource import WriterCommitMessage

from onceflow.config.deployment import Deployment
from onceflow.core.participant import Vote
from onceflow.sinks.data_source_base import PreCommitSource, PreCommitWriter, TaskAttempt
from onceflow.sinks.iceberg import tables
from onceflow.sinks.iceberg.kind import FORMAT  # the name this data source registers under
from onceflow.sinks.iceberg.participant import IcebergTableSink


@dataclass(frozen=True)
class DataFilesMessage(WriterCommitMessage):
    """The data files one successful task attempt wrote (``data_files.encode``)."""

    files: tuple[Mapping[str, Any], ...]
    table_location: str


class IcebergFilesWriter(PreCommitWriter[DataFilesMessage]):
    def catalog_properties(self) -> dict[str, str]:
        deployment = Deployment.from_option(self.options["deployment"])
        return deployment.catalog_properties(self.options["catalog"], f"{FORMAT} sink {self.options.sink!r}")

    def io_properties(self) -> dict[str, str]:
        """The FileIO settings of the table as the driver loaded it, over the catalog's own."""
        return {**self.catalog_properties(), **json.loads(self.options.get("io_properties") or "{}")}

    def stage(self, batches: Iterator, task: TaskAttempt) -> DataFilesMessage:
        from pyiceberg.table import StaticTable  # an optional package: imported where a table is written

        opts = self.options
        table = StaticTable.from_metadata(opts["metadata_location"], properties=self.io_properties())
        files = tables.write_data_files(table, opts["pipeline"], opts.sink, opts.batch_seq,
                                        opts.planned_at_ms, opts.attempt, batches)
        return DataFilesMessage(tuple(files), table.location())

    def vote(self, messages: list[DataFilesMessage]) -> Vote:
        opts = self.options
        sink = IcebergTableSink(opts.sink, opts["pipeline"], opts["table"], opts["catalog"], self.catalog_properties())
        location = messages[0].table_location if messages else ""
        return sink.vote_for(opts.batch_seq, opts.planned_at_ms, opts.attempt, location,
                             [f for m in messages for f in m.files], replaces=opts.replaces)


class OnceflowIcebergDataSource(PreCommitSource):
    format = FORMAT
    writes = "writes new data files"
    required = ("pipeline", "deployment", "sink", "catalog", "table", "metadata_location", "batch_seq",
                "planned_at_ms", "attempt")
    writer_type = IcebergFilesWriter


register = OnceflowIcebergDataSource.register
