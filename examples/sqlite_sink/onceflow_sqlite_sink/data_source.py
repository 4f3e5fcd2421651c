"""``onceflow_sqlite``: the Spark side of an sqlite sink (Spark's DataSourceWriter contract).

    writer()        driver: options checked
    write(batches)  executor, once per task ATTEMPT: split = Spark partition, staged under
                    the task attempt's own stage id (table.stage_split)
    commit(msgs)    a Python worker, once per job: the vote (the stages Spark took) goes to
                    the ledger through onceflow.sinks.api.record_vote
    abort(msgs)     a Python worker, when the job fails: nothing here; the rollback task
                    deletes every staged row of the batch
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from onceflow.sinks.api import record_vote

from .kind import DATABASE, FORMAT
from .table import stage_id, stage_split, vote_for

REQUIRED = ("pipeline", "deployment", "sink", "batch_seq", "batch_id", "attempt", DATABASE, "table")


@dataclass(frozen=True)
class StagedSplit(WriterCommitMessage):
    split: dict


class StagingWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], columns: list[str]):
        self.options, self.columns = options, columns

    def write(self, iterator) -> StagedSplit:
        from pyspark import TaskContext

        task, o = TaskContext.get(), self.options
        # taskAttemptId is unique in the application (attemptNumber restarts when a stage is retried).
        stage = stage_id(o["pipeline"], o["sink"], int(o["batch_seq"]), task.partitionId(), int(o["attempt"]),
                         task.taskAttemptId())
        return StagedSplit(stage_split(o[DATABASE], o["table"], self.columns, iterator, o["batch_id"],
                                       task.partitionId(), stage))

    def commit(self, messages) -> None:
        o = self.options
        record_vote(o, vote_for(o["sink"], int(o["batch_seq"]), int(o["attempt"]), o[DATABASE], o["table"],
                                [m.split for m in messages if m is not None],
                                int(o["replaces"]) if o.get("replaces") else None))

    def abort(self, messages) -> None:
        pass  # staged rows are invisible; the rollback task deletes the batch's


class OnceflowSqliteDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def writer(self, schema, overwrite: bool) -> StagingWriter:
        options = {str(k).lower(): str(v) for k, v in self.options.items()}
        missing = [k for k in REQUIRED if not options.get(k)]
        if overwrite or missing:
            raise ValueError(f"{FORMAT}: append only, with option(s) {', '.join(REQUIRED)} (missing: {missing})")
        return StagingWriter(options, schema.fieldNames())


def register(spark) -> None:
    spark.dataSource.register(OnceflowSqliteDataSource)
