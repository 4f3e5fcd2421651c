"""``onceflow_postgres``: the Spark side of a postgres sink (Spark's DataSourceWriter contract).

    writer()        driver: options checked
    write(batches)  executor, once per task ATTEMPT: split = Spark partition; older attempts'
                    prepared transactions of the split rolled back, the rows and the marker
                    written, PREPARE TRANSACTION (writer.prepare_split)
    commit(msgs)    a Python worker, once per job: the vote (every split's prepared id) goes
                    to the ledger through onceflow.sinks.api.record_vote
    abort(msgs)     a Python worker, when the job fails: the messages' transactions rolled
                    back; a failed task's are left to the rollback task (found by prefix)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from onceflow.sinks.api import record_vote

from .connection import conninfo
from .kind import CONNECTION_OPTION, FORMAT
from .writer import SplitAttempt, prepare_split, vote_for

REQUIRED = ("pipeline", "sink", "table", CONNECTION_OPTION, "batch_seq", "batch_id", "attempt")


@dataclass(frozen=True)
class PreparedSplit(WriterCommitMessage):
    split: dict


class PreparedTransactionWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], columns: list[str]):
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator) -> PreparedSplit:
        from pyspark import TaskContext

        context = TaskContext.get()
        o = self.options
        who = SplitAttempt(o["pipeline"], o["sink"], int(o["batch_seq"]), o["batch_id"], context.partitionId(),
                           int(o["attempt"]), context.attemptNumber())
        return PreparedSplit(prepare_split(conninfo(o[CONNECTION_OPTION]), o["table"], self.columns, iterator, who))

    def commit(self, messages: list[PreparedSplit | None]) -> None:
        o = self.options
        vote = vote_for(o["sink"], int(o["batch_seq"]), int(o["attempt"]), o["table"],
                        [m.split for m in messages if m is not None])
        record_vote(o, vote)

    def abort(self, messages: list[PreparedSplit | None]) -> None:
        import psycopg

        with psycopg.connect(conninfo(self.options[CONNECTION_OPTION]), autocommit=True) as conn:
            for message in messages:
                if message is not None:
                    try:
                        conn.tpc_rollback(message.split["gid"])
                    except psycopg.errors.UndefinedObject:
                        pass  # rolled back already


class OnceflowPostgresDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def writer(self, schema, overwrite: bool) -> PreparedTransactionWriter:
        if overwrite:
            raise ValueError(f"{FORMAT} appends in prepared transactions: use .mode('append')")
        options = {str(k).lower(): str(v) for k, v in self.options.items()}
        missing = [k for k in REQUIRED if not options.get(k)]
        if missing:
            raise ValueError(f"{FORMAT}: missing option(s) {', '.join(missing)}")
        return PreparedTransactionWriter(options, schema.fieldNames())


def register(spark) -> None:
    spark.dataSource.register(OnceflowPostgresDataSource)
