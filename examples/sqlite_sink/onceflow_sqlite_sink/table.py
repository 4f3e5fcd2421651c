"""An sqlite sink's tables, and each step on them [Spark executor: ``stage_split``; Airflow worker: the rest].

    stage_split(...)    one task attempt's rows into ``<table>_staged``, under its stage id
    verify(vote)        every voted split is staged whole, or committed
    commit(vote)        split by split, one transaction each: its staged rows into the table
                        and its marker row into ``onceflow_committed``
    abort(plan, votes)  every staged row of the batch deleted: any attempt, voted or not
    after_commit(plan)  the same, for the losing task attempts and the zombies

A stage id (``<pipeline>:<sink>:b<batch>:s<split>:a<attempt>.<task attempt>``) is one
task attempt's own; the marker row, written with the split's rows, tells a committed
split from one still to commit.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing, contextmanager

from onceflow.core import faults
from onceflow.sinks.api import Outcome, Participant, Result, Vote

BATCH_COLUMN, STAGE_COLUMN, MARKERS = "onceflow_batch", "onceflow_stage", "onceflow_committed"
AFTER_STAGE = faults.declare("sqlite.precommit.after_stage", "sqlite sink: a split's rows staged, its task not finished")
BETWEEN_SPLITS = faults.declare("sqlite.commit.between_splits", "sqlite sink commit: a split moved into the table, the next not")


class StageLost(Exception):
    """A voted split's staged rows are gone: nothing can commit them."""


def batch_prefix(pipeline: str, sink: str, batch_seq: int) -> str:
    return f"{pipeline}:{sink}:b{batch_seq}:"


def stage_id(pipeline: str, sink: str, batch_seq: int, split: int, attempt: int, task_attempt: int) -> str:
    return f"{batch_prefix(pipeline, sink, batch_seq)}s{split}:a{attempt}.{task_attempt}"


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@contextmanager
def transaction(database: str):
    """One write transaction; BEGIN IMMEDIATE: a concurrent writer waits (up to 30 s) instead of failing."""
    with closing(sqlite3.connect(database, timeout=30, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def create_tables(database: str, table: str, columns: list[str]) -> None:
    """[Spark driver, before the writers] The table, its staging table and the markers, if absent."""
    cols = ", ".join(map(q, columns))
    with transaction(database) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {q(table)} ({cols}, {BATCH_COLUMN} TEXT NOT NULL)")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {q(table + '_staged')} ({cols}, {BATCH_COLUMN} TEXT NOT NULL, "
                     f"{STAGE_COLUMN} TEXT NOT NULL)")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {MARKERS} (stage TEXT PRIMARY KEY, rows INTEGER NOT NULL)")


def stage_split(database: str, table: str, columns: list[str], batches, batch_id: str, split: int, stage: str) -> dict:
    """[Spark executor] ``batches`` (Arrow record batches) staged under ``stage``; what the vote records of it."""
    insert = (f"INSERT INTO {q(table + '_staged')} ({', '.join(map(q, [*columns, BATCH_COLUMN, STAGE_COLUMN]))}) "
              f"VALUES ({', '.join('?' * (len(columns) + 2))})")
    rows = 0
    with transaction(database) as conn:
        for batch in batches:
            conn.executemany(insert, [(*row, batch_id, stage) for row in zip(*(batch.column(c).to_pylist() for c in columns))])
            rows += batch.num_rows
    faults.fault_point(AFTER_STAGE)
    return {"split": split, "stage": stage, "rows": rows}


def vote_for(sink: str, batch_seq: int, attempt: int, database: str, table: str, splits, replaces: int | None = None) -> Vote:
    splits = sorted(splits, key=lambda s: s["split"])
    return Vote(sink, batch_seq, attempt, {"database": database, "table": table, "splits": splits},
                records=sum(s["rows"] for s in splits), replaces=replaces)


class SqliteTableSink(Participant):
    def __init__(self, name: str, pipeline: str, database: str, table: str):
        self.name, self.pipeline, self.database, self.table = name, pipeline, database, table

    def verify(self, vote: Vote) -> Result:
        return self._guarded(lambda: self._verify(vote))

    def commit(self, vote: Vote) -> Result:
        return self._guarded(lambda: self._commit(vote))

    def abort(self, plan, votes) -> Result:
        return self._guarded(lambda: self._delete_staged(plan.batch_seq))

    def after_commit(self, plan) -> None:
        result = self._guarded(lambda: self._delete_staged(plan.batch_seq))
        if not result.ok:
            raise RuntimeError(f"{result.detail}; the batch is committed, its staged rows stay until deleted")

    def _verify(self, vote: Vote) -> Result:
        with closing(sqlite3.connect(self.database, timeout=30)) as conn:
            for split in vote.payload["splits"]:
                staged = self._staged(conn, split["stage"])
                if staged != split["rows"] and not self._committed(conn, split["stage"]):
                    return Result(Outcome.FAILED, f"{self.table}: stage {split['stage']} holds {staged} of its "
                                                  f"{split['rows']} rows: abort the batch and run it again")
        return Result(Outcome.DONE, f"{len(vote.payload['splits'])} split(s) staged or committed")

    def _commit(self, vote: Vote) -> Result:
        moved = 0
        for split in vote.payload["splits"]:
            if moved:
                faults.fault_point(BETWEEN_SPLITS)
            with transaction(self.database) as conn:
                if self._committed(conn, split["stage"]):
                    continue
                self._move(conn, split)
            moved += 1
        return Result(Outcome.DONE if moved else Outcome.ALREADY_DONE, f"{moved} split(s) moved into {self.table}")

    def _move(self, conn, split: dict) -> None:
        """One split's staged rows into the table, and its marker row, in the caller's transaction."""
        if self._staged(conn, split["stage"]) != split["rows"]:
            raise StageLost(f"{self.table}: the commit was decided, but stage {split['stage']} no longer holds its "
                            f"{split['rows']} rows: a human must look")
        columns = ", ".join(q(row[1]) for row in conn.execute(f"PRAGMA table_info({q(self.table)})"))
        conn.execute(f"INSERT INTO {q(self.table)} ({columns}) SELECT {columns} FROM {q(self.table + '_staged')} "
                     f"WHERE {STAGE_COLUMN} = ?", [split["stage"]])
        self._mark(conn, split)

    def _mark(self, conn, split: dict) -> None:
        conn.execute(f"INSERT INTO {MARKERS} VALUES (?, ?)", [split["stage"], split["rows"]])

    def _delete_staged(self, batch_seq: int) -> Result:
        prefix = batch_prefix(self.pipeline, self.name, batch_seq)
        with transaction(self.database) as conn:
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", [self.table + "_staged"]).fetchone():
                return Result(Outcome.ALREADY_DONE, "no staging table yet: nothing was staged")
            deleted = conn.execute(f"DELETE FROM {q(self.table + '_staged')} WHERE substr({STAGE_COLUMN}, 1, ?) = ?",
                                   [len(prefix), prefix]).rowcount
        return Result(Outcome.DONE if deleted else Outcome.ALREADY_DONE, f"{deleted} staged row(s) deleted")

    def _staged(self, conn, stage: str) -> int:
        return conn.execute(f"SELECT count(*) FROM {q(self.table + '_staged')} WHERE {STAGE_COLUMN} = ?", [stage]).fetchone()[0]

    def _committed(self, conn, stage: str) -> bool:
        return conn.execute(f"SELECT 1 FROM {MARKERS} WHERE stage = ?", [stage]).fetchone() is not None

    def _guarded(self, step) -> Result:
        try:
            return step()
        except StageLost as exc:
            return Result(Outcome.FAILED, str(exc))
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED"):  # another writer, past the timeout
                return Result(Outcome.RETRY_LATER, f"{self.table} in {self.database}: {exc}; retry")
            return Result(Outcome.FAILED, f"{self.table} in {self.database}: {type(exc).__name__}: {exc}")
