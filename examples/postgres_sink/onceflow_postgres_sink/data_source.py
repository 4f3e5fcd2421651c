"""``onceflow_postgres``: the Spark side of a postgres sink, on the sinks' data-source base
(``onceflow.sinks.data_source_base``: the call sequence, the options, the vote).

    stage    executor, once per task ATTEMPT: older attempts' prepared transactions of the split
             rolled back, the rows and the marker written, PREPARE TRANSACTION under the task
             attempt's own id (writer.prepare_split)
    vote     every split's prepared id
    discard  a failed job: the messages' transactions rolled back; a failed task's are left to
             the rollback task (found by prefix)
"""

from __future__ import annotations

import psycopg

from onceflow.sinks.data_source_base import PreCommitSource, PreCommitWriter, StagedSplit

from .connection import conninfo
from .kind import CONNECTION_OPTION, FORMAT
from .writer import SplitAttempt, prepare_split, vote_for


class PreparedTransactionWriter(PreCommitWriter[StagedSplit]):
    def stage(self, batches, task) -> StagedSplit:
        o = self.options
        who = SplitAttempt(o["pipeline"], o.sink, o.batch_seq, o.batch_id, task.split, o.attempt, task.task_attempt)
        return StagedSplit(prepare_split(conninfo(o[CONNECTION_OPTION]), o["table"], self.schema.fieldNames(),
                                       batches, who))

    def vote(self, messages):
        return vote_for(self.options.sink, self.options.batch_seq, self.options.attempt, self.options["table"],
                        [m.staged for m in messages])

    def discard(self, messages) -> None:
        with psycopg.connect(conninfo(self.options[CONNECTION_OPTION]), autocommit=True) as conn:
            for message in messages:
                try:
                    conn.tpc_rollback(message.staged["gid"])
                except psycopg.errors.UndefinedObject:
                    pass  # rolled back already


class OnceflowPostgresDataSource(PreCommitSource):
    format = FORMAT
    writes = "appends in prepared transactions"
    required = ("pipeline", "sink", "table", CONNECTION_OPTION, "batch_seq", "attempt")
    writer_type = PreparedTransactionWriter


register = OnceflowPostgresDataSource.register
