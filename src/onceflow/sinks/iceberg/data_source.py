"""``onceflow_iceberg``: a Spark Python data source that pre-commits an Iceberg table's data files.

Call sequence (Spark's DataSourceWriter contract)::

    OnceflowIcebergDataSource.writer()  driver: options parsed and checked (fails fast)
    IcebergFilesWriter.write(batches)   executor, once per task ATTEMPT: the partition's rows
                                        as Parquet data files of the table (one per table
                                        partition), under the attempt's own directory
                                        (a fresh file name per task attempt); returns their
                                        metadata and statistics
    IcebergFilesWriter.commit(msgs)     a Python worker, once per job, with the message of
                                        exactly one successful attempt per partition: builds
                                        the Vote, records it in the ledger
    IcebergFilesWriter.abort(msgs)      a Python worker, when the job fails: nothing; the
                                        rollback's IcebergTableSink.abort deletes the batch's
                                        directory, files of failed tasks included

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

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from onceflow.sinks.iceberg import tables
from onceflow.sinks.iceberg.kind import FORMAT  # the name this data source registers under
from onceflow.sinks.votes import record_vote
from onceflow.sinks.writer_options import FAULTS_OPTION, armed_as_job, checked_options, int_option

REQUIRED = ("pipeline", "deployment", "sink", "catalog", "table", "metadata_location", "batch_seq", "planned_at_ms",
            "attempt")


@dataclass(frozen=True)
class DataFilesMessage(WriterCommitMessage):
    """The data files one successful task attempt wrote (``data_files.encode``)."""

    files: tuple[Mapping[str, Any], ...]
    table_location: str


@dataclass(frozen=True)
class IcebergWriteOptions:
    pipeline: str
    sink: str
    catalog: str
    table: str
    metadata_location: str
    batch_seq: int
    planned_at_ms: int
    attempt: int
    raw: Mapping[str, str]
    replaces: int | None = None
    faults: str = ""  # the run's faults, for a Spark Connect server's workers (writer_options)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "IcebergWriteOptions":
        opts = checked_options(FORMAT, options, REQUIRED)
        ints = {key: int_option(FORMAT, opts, key) for key in ("batch_seq", "planned_at_ms", "attempt", "replaces")}
        return cls(opts["pipeline"], opts["sink"], opts["catalog"], opts["table"], opts["metadata_location"],
                   ints["batch_seq"], ints["planned_at_ms"], ints["attempt"], opts, ints["replaces"],
                   opts.get(FAULTS_OPTION, ""))

    def catalog_properties(self) -> dict[str, str]:
        from onceflow.config.deployment import Deployment

        deployment = Deployment.from_option(self.raw["deployment"])
        return deployment.catalog_properties(self.catalog, f"{FORMAT} sink {self.sink!r}")

    def io_properties(self) -> dict[str, str]:
        """The FileIO settings of the table as the driver loaded it, over the catalog's own."""
        return {**self.catalog_properties(), **json.loads(self.raw.get("io_properties") or "{}")}

    def table_sink(self):
        from onceflow.sinks.iceberg.participant import IcebergTableSink

        return IcebergTableSink(self.sink, self.pipeline, self.table, self.catalog, self.catalog_properties())


class IcebergFilesWriter(DataSourceArrowWriter):
    def __init__(self, options: IcebergWriteOptions):
        self.options = options

    @armed_as_job
    def write(self, iterator: Iterator) -> DataFilesMessage:
        """Executor: this task attempt's rows as data files under the attempt's directory."""
        from pyiceberg.table import StaticTable

        opts = self.options
        table = StaticTable.from_metadata(opts.metadata_location, properties=opts.io_properties())
        files = tables.write_data_files(table, opts.pipeline, opts.sink, opts.batch_seq, opts.planned_at_ms, opts.attempt,
                                        iterator)
        return DataFilesMessage(tuple(files), table.location())

    @armed_as_job
    def commit(self, messages: list[DataFilesMessage | None]) -> None:
        """Python worker, once per successful job: vote for exactly these attempts' files."""
        done = [m for m in messages if m is not None]
        location = done[0].table_location if done else ""
        files = [f for m in done for f in m.files]
        opts = self.options
        vote = opts.table_sink().vote_for(opts.batch_seq, opts.planned_at_ms, opts.attempt, location, files,
                                          replaces=opts.replaces)
        record_vote(self.options.raw, vote)

    def abort(self, messages: list[DataFilesMessage | None]) -> None:
        """Nothing: the rollback deletes the batch's whole directory (IcebergTableSink.abort)."""


class OnceflowIcebergDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def writer(self, schema, overwrite: bool) -> IcebergFilesWriter:
        if overwrite:
            raise ValueError(f"{FORMAT} writes new data files and never overwrites: use .mode('append'); "
                             "what a batch replaces is decided at commit, not by the writer")
        return IcebergFilesWriter(IcebergWriteOptions.parse(self.options))


def register(spark) -> None:
    """Driver: make ``format("onceflow_iceberg")`` available in this session."""
    spark.dataSource.register(OnceflowIcebergDataSource)
