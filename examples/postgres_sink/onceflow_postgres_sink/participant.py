"""The commit side of a postgres sink [Airflow worker: commit task, rollback task, recovery].

    verify(vote)        every split's transaction is still prepared (or already committed)
    commit(vote)        COMMIT PREPARED each split's transaction; a split whose transaction
                        is gone and whose marker row is visible was committed before
    abort(plan, votes)  ROLLBACK PREPARED every transaction of the batch, of every attempt,
                        voted or not (found by the batch's prefix)
    after_commit(plan)  the same, for what a zombie attempt prepared after the vote

Each call is idempotent: it asks PostgreSQL where each transaction stands
before it acts. A lost connection, or another process ending the same
transaction at that moment, is RETRY_LATER; a voted transaction that is
neither prepared nor committed is FAILED (someone rolled it back: a human must
look, the rows are gone), as is any other refusal (a permission, a missing
table), with PostgreSQL's reason.
"""

from __future__ import annotations

from typing import Sequence

import psycopg

from onceflow.core import faults
from onceflow.sinks.api import Outcome, Participant, Plan, Result, Vote

from . import ids
from .connection import conninfo
from .tables import committed, prepared

BETWEEN_SPLITS = faults.declare("postgres.commit.between_splits",
                                "postgres sink commit: one split's prepared transaction committed, the next not")


def splits_of(vote: Vote) -> list[dict]:
    return list(vote.payload["splits"])


class PostgresTableSink(Participant):
    def __init__(self, name: str, pipeline: str, target: str, conn_id: str):
        self.name = name
        self.pipeline = pipeline
        self.target = target
        self.conn_id = conn_id

    def verify(self, vote: Vote) -> Result:
        return self._guarded(vote.batch_seq, lambda conn: self._verify(conn, vote))

    def commit(self, vote: Vote) -> Result:
        return self._guarded(vote.batch_seq, lambda conn: self._commit(conn, vote))

    def abort(self, plan: Plan, votes: Sequence[Vote]) -> Result:
        return self._guarded(plan.batch_seq, lambda conn: self._roll_back_batch(conn, plan.batch_seq))

    def after_commit(self, plan: Plan) -> None:
        result = self._guarded(plan.batch_seq, lambda conn: self._roll_back_batch(conn, plan.batch_seq))
        if not result.ok:
            raise RuntimeError(f"{result.detail}; the batch is committed, leftover prepared transactions of the "
                               f"batch stay until rolled back (ids starting {ids.batch_prefix(self.pipeline, self.name, plan.batch_seq)})")

    # -- the steps, on one autocommit connection ----------------------------------------

    def _where(self, conn, vote: Vote) -> tuple[list[str], set[str], set[str]]:
        gids = [s["gid"] for s in splits_of(vote)]
        return gids, set(prepared(conn, ids.batch_prefix(self.pipeline, self.name, vote.batch_seq))), committed(conn, self.target, gids)

    def _verify(self, conn, vote: Vote) -> Result:
        gids, open_, done = self._where(conn, vote)
        gone = [g for g in gids if g not in open_ and g not in done]
        if gone:
            return Result(Outcome.FAILED, f"{self._what(vote.batch_seq)}: prepared transaction(s) {', '.join(gone)} "
                                          "are gone (rolled back): abort the batch and run it again")
        return Result(Outcome.DONE, f"{len(gids)} split(s) prepared or committed")

    def _commit(self, conn, vote: Vote) -> Result:
        gids, open_, done = self._where(conn, vote)
        gone = [g for g in gids if g not in open_ and g not in done]
        if gone:
            return Result(Outcome.FAILED, f"{self._what(vote.batch_seq)}: the commit was decided, but prepared "
                                          f"transaction(s) {', '.join(gone)} were rolled back outside onceflow: "
                                          "their rows are gone; a human must look")
        to_commit = [g for g in gids if g in open_]
        for i, gid in enumerate(to_commit):
            if i:
                faults.fault_point(BETWEEN_SPLITS)
            conn.tpc_commit(gid)
        if not to_commit:
            return Result(Outcome.ALREADY_DONE, f"{len(gids)} split(s) committed before")
        return Result(Outcome.DONE, f"committed {len(to_commit)} prepared transaction(s), {len(gids) - len(to_commit)} before")

    def _roll_back_batch(self, conn, batch_seq: int) -> Result:
        lingering = prepared(conn, ids.batch_prefix(self.pipeline, self.name, batch_seq))
        for gid in lingering:
            conn.tpc_rollback(gid)
        if not lingering:
            return Result(Outcome.ALREADY_DONE, "no prepared transaction of the batch")
        return Result(Outcome.DONE, f"rolled back {len(lingering)} prepared transaction(s)")

    def _what(self, batch_seq: int) -> str:
        return f"sink {self.name} (table {self.target}), batch {batch_seq}"

    def _guarded(self, batch_seq: int, step) -> Result:
        try:
            with psycopg.connect(conninfo(self.conn_id), autocommit=True, connect_timeout=10) as conn:
                return step(conn)
        except psycopg.OperationalError as exc:  # the server is down or the connection was lost: nothing is decided
            return Result(Outcome.RETRY_LATER, f"{self._what(batch_seq)}: PostgreSQL did not answer ({exc}); retry")
        except (psycopg.errors.UndefinedObject, psycopg.errors.ObjectNotInPrerequisiteState) as exc:
            # Another process (a recovery, a second commit task) ended or is ending it between our look and our act.
            return Result(Outcome.RETRY_LATER, f"{self._what(batch_seq)}: {exc}; look again")
        except psycopg.Error as exc:  # refused for good: a permission, a missing table, a wrong setting
            return Result(Outcome.FAILED, f"{self._what(batch_seq)}: PostgreSQL refused ({type(exc).__name__}: {exc})")
