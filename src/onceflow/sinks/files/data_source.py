"""``onceflow_files``: a Spark Python data source that pre-commits Parquet files.

On the sinks' data-source base (``onceflow.sinks.data_source_base``: the call
sequence, the options, the vote), a task attempt stages its split as one new
Parquet file under ``<sink>/_staging/<batch>/<attempt>/`` or, on S3, pending at
``<sink>/batch=<batch>/`` (``FileSink.stage``); the vote lists the files of the
attempts Spark took; a failed job's abort removes the files its messages name,
and ``FileSink.abort`` the rest (failed tasks' files, pending uploads).

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
from typing import Iterator

from pyspark.sql.datasource import WriterCommitMessage

from onceflow.core.participant import Vote
from onceflow.sinks.data_source_base import PreCommitSource, PreCommitWriter, TaskAttempt
from onceflow.sinks.files.entries import FileEntry
from onceflow.sinks.files.kind import FORMAT  # the name this data source registers under
from onceflow.sinks.files.participant import FileSink
from onceflow.storage import storage_for


@dataclass(frozen=True)
class StagedFileMessage(WriterCommitMessage):
    """What one successful task attempt staged (None: its partition was empty)."""

    entry: FileEntry | None


class StagedParquetWriter(PreCommitWriter[StagedFileMessage]):
    def file_sink(self) -> FileSink:
        path = self.options["path"]
        return FileSink(self.options.sink, path, storage_for(path, self.options.get("storage") or None, self.options.raw))

    def stage(self, batches: Iterator, task: TaskAttempt) -> StagedFileMessage:
        return StagedFileMessage(self.file_sink().stage(batches, self.options.batch_seq, self.options.attempt,
                                                        split=task.split, task_attempt=task.task_attempt))

    def vote(self, messages: list[StagedFileMessage]) -> Vote:
        entries = [m.entry for m in messages if m.entry is not None]
        return self.file_sink().vote_for(self.options.batch_seq, self.options.attempt, entries,
                                         replaces=self.options.replaces)

    def discard(self, messages: list[StagedFileMessage]) -> None:
        """Failed tasks' files (no message) are left to FileSink.abort."""
        sink = self.file_sink()
        for message in messages:
            if message.entry is not None:
                sink.discard(message.entry)


class OnceflowFilesDataSource(PreCommitSource):
    format = FORMAT
    writes = "stages new files"
    required = ("sink", "path", "batch_seq", "attempt")
    writer_type = StagedParquetWriter


register = OnceflowFilesDataSource.register
