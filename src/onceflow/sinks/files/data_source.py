"""``onceflow_files``: a Spark Python data source that pre-commits Parquet files.

Call sequence (Spark's DataSourceWriter contract)::

    OnceflowFilesDataSource.writer()   driver: options parsed and checked (fails fast)
    StagedParquetWriter.write(batches) executor, once per task ATTEMPT: one new Parquet file,
                                       staged under <sink>/_staging/<batch>/<attempt>/ or, on
                                       S3, pending at <sink>/batch=<batch>/ (FileSink.stage),
                                       returns StagedFileMessage(entry)
    StagedParquetWriter.commit(msgs)   a Python worker (NOT the driver), once per job, with
                                       the message of exactly one successful attempt per
                                       partition: builds the Vote, calls record_vote()
    StagedParquetWriter.abort(msgs)    a Python worker, when the job fails: removes the files
                                       the messages name; ``None`` messages (failed tasks)
                                       are cleaned by FileSink.abort, which removes all
                                       staging and pending uploads of the batch

Why no duplicates from Spark itself: every task attempt writes a file of its
own (fresh name), and only the attempts Spark committed reach
``commit(messages)``. Files of failed or speculative attempts are in no vote,
so promotion never touches them and abort deletes them.

Usage::

    register(spark)
    (df.write.format("onceflow_files").mode("append")
       .option("sink", "page_minute_counts").option("path", uri)
       .option("batch_seq", "7").option("attempt", "1")
       .option("pipeline", spec.name).option("deployment", deployment.to_option())  # vote -> ledger
       .save())                                  # (or .option("vote_path", uri) outside a pipeline)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    WriterCommitMessage,
)

from onceflow.storage import storage_for
from onceflow.sinks.files.entries import FileEntry
from onceflow.sinks.files.participant import FileSink
from onceflow.sinks.files.kind import FORMAT  # the name this data source registers under
from onceflow.sinks.votes import VOTE_PATH_OPTION, record_vote
from onceflow.sinks.writer_options import FAULTS_OPTION, armed_as_job, checked_options, int_option

REQUIRED = ("sink", "path", "batch_seq", "attempt")


@dataclass(frozen=True)
class StagedFileMessage(WriterCommitMessage):
    """What one successful task attempt staged (None: its partition was empty)."""

    entry: FileEntry | None


@dataclass(frozen=True)
class FilesWriteOptions:
    sink: str
    path: str
    batch_seq: int
    attempt: int
    storage_kind: str | None
    raw: Mapping[str, str]
    # The committed batch this one replaces (a reprocessed interval), if any.
    replaces: int | None = None
    faults: str = ""  # the run's faults, for a Spark Connect server's workers (writer_options)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "FilesWriteOptions":
        opts = checked_options(FORMAT, options, REQUIRED)
        if not (opts.get("pipeline") and opts.get("deployment")) and not opts.get(VOTE_PATH_OPTION):
            raise ValueError(f"{FORMAT}: give options 'pipeline' and 'deployment' (the pipeline's name and "
                             f"Deployment.to_option(): the vote goes to its ledger) or '{VOTE_PATH_OPTION}' (the vote is written there)")
        ints = {key: int_option(FORMAT, opts, key) for key in ("batch_seq", "attempt", "replaces")}
        return cls(opts["sink"], opts["path"], ints["batch_seq"], ints["attempt"], opts.get("storage") or None, opts,
                   ints["replaces"], opts.get(FAULTS_OPTION, ""))

    def file_sink(self) -> FileSink:
        return FileSink(self.sink, self.path, storage_for(self.path, self.storage_kind, self.raw))


class StagedParquetWriter(DataSourceArrowWriter):
    def __init__(self, options: FilesWriteOptions):
        self.options = options

    @armed_as_job
    def write(self, iterator: Iterator) -> StagedFileMessage:
        """Executor: stage this task attempt's partition as one Parquet file."""
        from pyspark import TaskContext

        context = TaskContext.get()
        entry = self.options.file_sink().stage(iterator, self.options.batch_seq, self.options.attempt,
                                               split=context.partitionId(), task_attempt=context.attemptNumber())
        return StagedFileMessage(entry)

    @armed_as_job
    def commit(self, messages: list[StagedFileMessage | None]) -> None:
        """Python worker, once per successful job: vote for exactly these attempts."""
        entries = [m.entry for m in messages if m is not None and m.entry is not None]
        vote = self.options.file_sink().vote_for(self.options.batch_seq, self.options.attempt, entries,
                                                 replaces=self.options.replaces)
        record_vote(self.options.raw, vote)

    @armed_as_job
    def abort(self, messages: list[StagedFileMessage | None]) -> None:
        """Python worker, once per failed job: delete what the messages name.
        Failed tasks' files (``None`` messages) are left to FileSink.abort."""
        sink = self.options.file_sink()
        for message in messages:
            if message is not None and message.entry is not None:
                sink.discard(message.entry)


class OnceflowFilesDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def writer(self, schema, overwrite: bool) -> StagedParquetWriter:
        if overwrite:
            raise ValueError(f"{FORMAT} stages new files and never overwrites: use .mode('append'); "
                             "what a batch replaces is decided at commit, not by the writer")
        return StagedParquetWriter(FilesWriteOptions.parse(self.options))


def register(spark) -> None:
    """Driver: make ``format("onceflow_files")`` available in this session."""
    spark.dataSource.register(OnceflowFilesDataSource)
