"""``onceflow_sqlite``: the Spark side of an sqlite sink, on the sinks' data-source base
(``onceflow.sinks.data_source_base``: the call sequence, the options, the vote).

    stage    executor, once per task ATTEMPT: the split's rows staged under the task attempt's
             own stage id (table.stage_split)
    vote     the stages Spark took
    discard  nothing (the default): the rollback task deletes every staged row of the batch
"""

from __future__ import annotations

from onceflow.sinks.data_source_base import PreCommitSource, PreCommitWriter, StagedSplit

from .kind import DATABASE, FORMAT
from .table import stage_id, stage_split, vote_for


class StagingWriter(PreCommitWriter[StagedSplit]):
    def stage(self, batches, task) -> StagedSplit:
        o = self.options
        stage = stage_id(o["pipeline"], o.sink, o.batch_seq, task.split, o.attempt, task.task_attempt)
        return StagedSplit(stage_split(o[DATABASE], o["table"], self.schema.fieldNames(), batches, o.batch_id,
                                       task.split, stage))

    def vote(self, messages):
        o = self.options
        return vote_for(o.sink, o.batch_seq, o.attempt, o[DATABASE], o["table"], [m.staged for m in messages], o.replaces)


class OnceflowSqliteDataSource(PreCommitSource):
    format = FORMAT
    writes = "stages rows to move in at the commit"
    required = ("pipeline", "deployment", "sink", "batch_seq", "attempt", DATABASE, "table")
    writer_type = StagingWriter


register = OnceflowSqliteDataSource.register
