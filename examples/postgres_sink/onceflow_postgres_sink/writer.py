"""One split of one attempt: its rows and marker in a transaction left prepared [Spark executor].

Before it writes, an attempt rolls back the prepared transactions that older
batch attempts of its split left (a zombie's, a failed job's): their rows must
never be committed, and each holds a slot of ``max_prepared_transactions`` and
holds back vacuum. Another task attempt of the same batch attempt is left
alone: Spark may still take its message (a speculative pair), and the vote
names whichever it took; the rollback task and ``after_commit`` end the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import psycopg
from psycopg import sql

from onceflow.core import faults
from onceflow.sinks.api import ConfigurationError, Vote

from . import ids
from .tables import BATCH_COLUMN, MARKERS, markers_sql, prepared, split_target, table_sql

CONNECT_TIMEOUT_S = 30
AFTER_PREPARE = faults.declare("postgres.precommit.after_prepare",
                               "postgres sink: a split's transaction prepared, its Spark task not yet finished")


@dataclass(frozen=True)
class SplitAttempt:
    """Who writes: one Spark task attempt of one split of one batch attempt."""

    pipeline: str
    sink: str
    batch_seq: int
    batch_id: str
    split: int
    attempt: int
    task_attempt: int = 0

    @property
    def gid(self) -> str:
        return ids.gid(self.pipeline, self.sink, self.batch_seq, self.split, self.attempt, self.task_attempt)

    def older(self, gid: str) -> bool:
        """``gid`` is of an older batch attempt of the split."""
        theirs = ids.attempt_of(gid)
        return theirs is not None and theirs[0] < self.attempt


class MarkerTaken(ConfigurationError):
    """The split's marker id is already in the markers table: an earlier ledger's batch of the same number."""

    def __init__(self, who: SplitAttempt, target: str):
        schema = split_target(target)[0]
        super().__init__(
            f"pipeline {who.pipeline!r}, output {who.sink!r}: {schema}.{MARKERS} already holds {who.gid!r}, the marker "
            f"of a committed transaction of batch {who.batch_seq} from an earlier ledger of a pipeline with this name "
            "(its warehouse was reset, or another deployment runs a pipeline of the same name on this database). "
            "A marker is how a commit is told from a rollback, so it is never reused: give the pipeline a new name, "
            f"or delete the pipeline's rows from {schema}.{MARKERS} once no batch of the old ledger is unfinished")


def roll_back_older(conninfo: str, who: SplitAttempt) -> list[str]:
    """Roll back what older attempts of ``who``'s split left prepared; the ids rolled back."""
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        older = [g for g in prepared(conn, ids.split_prefix(who.pipeline, who.sink, who.batch_seq, who.split)) if who.older(g)]
        for gid in older:
            conn.tpc_rollback(gid)
    return older


def prepare_split(conninfo: str, target: str, columns: list[str], batches: Iterable, who: SplitAttempt) -> dict:
    """Write ``batches`` (Arrow record batches of ``columns``) and the split's marker, then PREPARE
    TRANSACTION; what the vote records of the split."""
    roll_back_older(conninfo, who)
    rows = 0
    conn = psycopg.connect(conninfo, connect_timeout=CONNECT_TIMEOUT_S)  # not a context manager: its exit would commit, which a prepared one refuses
    try:
        conn.tpc_begin(who.gid)
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(
            table_sql(target), sql.SQL(", ").join(map(sql.Identifier, [*columns, BATCH_COLUMN])))
        with conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
            for batch in batches:
                values = [batch.column(name).to_pylist() for name in columns]
                for row in zip(*values):
                    copy.write_row((*row, who.batch_id))
                    rows += 1
        try:
            conn.execute(sql.SQL("INSERT INTO {} (gid, pipeline, sink, batch_seq, split, attempt, rows) "
                                 "VALUES (%s, %s, %s, %s, %s, %s, %s)").format(markers_sql(target)),
                         [who.gid, who.pipeline, who.sink, who.batch_seq, who.split, who.attempt, rows])
        except psycopg.errors.UniqueViolation:
            raise MarkerTaken(who, target) from None
        conn.tpc_prepare()
    finally:
        conn.close()  # before PREPARE, closing rolls the transaction back; after it, the server keeps it
    faults.fault_point(AFTER_PREPARE)
    return {"split": who.split, "gid": who.gid, "rows": rows}


def vote_for(sink: str, batch_seq: int, attempt: int, target: str, splits: Iterable[dict], replaces: int | None = None) -> Vote:
    """The vote of an attempt whose splits ``prepare_split`` wrote: every split's transaction id."""
    splits = sorted(splits, key=lambda s: s["split"])
    return Vote(sink, batch_seq, attempt, {"table": target, "splits": splits}, records=sum(s["rows"] for s in splits),
                replaces=replaces)
