"""The Iceberg sink participant: a batch is committed as one table snapshot.

Call sequence (see onceflow.protocol.participant)::

    Spark task attempt      writes Parquet data files under the batch attempt's directory
                            (tables.attempt_dir); no snapshot references them
    vote_for(...)  -> Vote  once per job: the files and their statistics (data_files)
    verify(vote)   -> Result  Airflow worker: every voted file is there with its size
    commit(vote)   -> Result  one snapshot adding every voted file (and, replacing a
                            batch, removing that batch's files), its summary naming the
                            pipeline, sink, batch and attempt; any number of times
    abort(plan, votes)       deletes the batch's directory, which no snapshot references

The snapshot is the commit point: readers of the table (Spark, Trino, DuckDB,
pyiceberg) see all of a batch or none of it. A commit first looks for its
batch in the table's snapshots, so a repeated or racing commit finds the one
snapshot and reports ALREADY_DONE; a conflict with any other writer is
retried on the refreshed table. Expiring snapshots is safe for batches whose
commit has finished: the ledger, not the table, says a batch is done.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Mapping, Sequence

from .. import faults
from ..protocol.batch_id import BatchId
from ..protocol.participant import Outcome, Result, Vote
from ..protocol.plan import Plan
from . import data_files, tables

log = logging.getLogger(__name__)

BEFORE_SNAPSHOT = faults.declare("iceberg.commit.before_snapshot", "iceberg sink commit: no snapshot committed yet")
AFTER_SNAPSHOT = faults.declare("iceberg.commit.after_snapshot",
                                "iceberg sink commit: snapshot committed, files of other attempts not deleted")
# The snapshot summary keys that tie a snapshot to its batch.
PIPELINE_KEY = "onceflow.pipeline"
SINK_KEY = "onceflow.sink"
BATCH_KEY = "onceflow.batch"
ATTEMPT_KEY = "onceflow.attempt"
REPLACES_KEY = "onceflow.replaces"
# A concurrent writer's commit makes ours fail its requirement check: refresh and try again.
CONFLICT_RETRIES = 10
NO_COMMIT_RETRIES = ("commit.retry.num-retries", "0")  # pyiceberg's TableProperties.COMMIT_NUM_RETRIES


class IcebergTableSink:
    """One Iceberg table output of pipeline ``pipeline``, in the catalog ``catalog_properties`` describe."""

    def __init__(self, name: str, pipeline: str, table: str, catalog_conn_id: str, catalog_properties: Mapping[str, str]):
        self.name = name
        self.pipeline = pipeline
        self.table_name = table
        self.catalog_conn_id = catalog_conn_id
        self.catalog_properties = dict(catalog_properties)

    # -- pre-commit side (what the Spark job needs) -------------------------

    def vote_for(self, batch_seq: int, attempt: int, table_location: str, files: Iterable[Mapping[str, Any]],
                 replaces: int | None = None) -> Vote:
        """The vote for the data files ``files`` (``data_files.encode``) that one
        successful attempt per Spark partition wrote under the attempt's directory."""
        entries = sorted(files, key=lambda f: f["path"])
        where = tables.attempt_dir(table_location, self.pipeline, self.name, batch_seq, attempt) + "/"
        for entry in entries:
            if not entry["path"].startswith(where):
                raise ValueError(f"{entry['path']} is not under {where}: it cannot be part of "
                                 f"batch {BatchId(batch_seq)} attempt {attempt}")
        payload: dict[str, Any] = {"table": self.table_name, "location": table_location, "files": entries}
        if replaces is not None:
            payload["replaces"] = replaces
        return Vote(self.name, batch_seq, attempt, payload, records=sum(int(f["rows"]) for f in entries))

    # -- Participant ---------------------------------------------------------

    def verify(self, vote: Vote) -> Result:
        """DONE if every voted file is there with its recorded size; ALREADY_DONE
        if the batch is in a snapshot; FAILED otherwise (I7). Read-only."""
        return self._guarded(vote, self._verify)

    def commit(self, vote: Vote) -> Result:
        """One snapshot with the vote's files. Idempotent: ALREADY_DONE when the
        batch's snapshot exists; a crash before it leaves the table unchanged."""
        return self._guarded(vote, self._commit)

    def abort(self, plan: Plan, votes: Sequence[Vote]) -> Result:
        """Delete the files every attempt of the batch wrote, voted or not.
        Refuses (FAILED) if a snapshot holds the batch: its decision is COMMIT."""
        seq = plan.batch_seq
        try:
            table = self._catalog().load_table(self.table_name)
            snapshot = self._snapshot_of(table, seq)
            if snapshot is not None:
                return Result(Outcome.FAILED, f"{self._what(seq)} is committed (snapshot {snapshot.snapshot_id}); "
                              "refusing to abort it. Its decision is COMMIT: run the commit (recovery) instead")
            removed = self._delete_dir(table.io, tables.batch_dir(table.location(), self.pipeline, self.name, seq))
        except Exception as exc:
            return self._error(seq, exc)
        return Result(Outcome.DONE if removed else Outcome.ALREADY_DONE)

    # -- internals -----------------------------------------------------------

    def _what(self, seq: int) -> str:
        return f"batch {BatchId(seq)} of iceberg sink {self.name} ({self.table_name})"

    def _catalog(self):
        return tables.open_catalog(self.catalog_conn_id, self.catalog_properties)

    def _error(self, seq: int, exc: Exception) -> Result:
        from pyiceberg.exceptions import CommitFailedException, NoSuchTableError

        if isinstance(exc, NoSuchTableError):
            return Result(Outcome.FAILED, f"{self._what(seq)}: the table is gone from catalog "
                          f"{self.catalog_conn_id!r} ({exc}); restore it, or investigate the catalog")
        if isinstance(exc, (CommitFailedException, ConnectionError, TimeoutError)) or _is_transient(exc):
            return Result(Outcome.RETRY_LATER, f"{self._what(seq)}: catalog or storage unavailable ({exc}); retry")
        return Result(Outcome.FAILED, f"{self._what(seq)}: {type(exc).__name__}: {exc}")

    def _guarded(self, vote: Vote, step) -> Result:
        if vote.participant != self.name or vote.payload.get("table") != self.table_name:
            return Result(Outcome.FAILED, f"vote of {vote.participant} for table {vote.payload.get('table')} "
                          f"handed to iceberg sink {self.name} of {self.table_name}: wrong participant")
        try:
            return step(vote)
        except Exception as exc:
            return self._error(vote.batch_seq, exc)

    def _snapshot_of(self, table, seq: int):
        """The snapshot that committed batch ``seq`` of this sink, or None."""
        for snapshot in table.metadata.snapshots:
            summary = snapshot.summary
            if (summary is not None and summary[BATCH_KEY] == str(BatchId(seq))
                    and summary[SINK_KEY] == self.name and summary[PIPELINE_KEY] == self.pipeline):
                return snapshot
        return None

    def _settled(self, table, vote: Vote) -> Result | None:
        """ALREADY_DONE (after cleaning up) if the batch is in a snapshot of this very
        vote, FAILED if of another attempt, None if it is not committed."""
        snapshot = self._snapshot_of(table, vote.batch_seq)
        if snapshot is None:
            return None
        if snapshot.summary[ATTEMPT_KEY] != str(vote.attempt):
            return Result(Outcome.FAILED, f"{self._what(vote.batch_seq)} is committed by attempt "
                          f"{snapshot.summary[ATTEMPT_KEY]} (snapshot {snapshot.snapshot_id}), not by attempt "
                          f"{vote.attempt}: a batch has one decision (I2). Investigate the ledger; nothing was changed")
        self._clean_up(table, vote)
        return Result(Outcome.ALREADY_DONE, f"{self._what(vote.batch_seq)} was already committed "
                      f"(snapshot {snapshot.snapshot_id})")

    def _verify(self, vote: Vote) -> Result:
        table = self._catalog().load_table(self.table_name)
        if self._snapshot_of(table, vote.batch_seq) is not None:
            return Result(Outcome.ALREADY_DONE, f"{self._what(vote.batch_seq)} is already committed")
        for entry in vote.payload["files"]:
            found = table.io.new_input(entry["path"])
            size = len(found) if found.exists() else None
            if size != entry["size"]:
                state = "is missing" if size is None else f"has {size} bytes, the vote recorded {entry['size']}"
                return Result(Outcome.FAILED, f"{self._what(vote.batch_seq)} attempt {vote.attempt}: data file "
                              f"{entry['path']} {state}. Abort the batch and re-run it (its offsets did not move)")
        return Result(Outcome.DONE, f"{len(vote.payload['files'])} data files, {vote.records} rows written")

    def _commit(self, vote: Vote) -> Result:
        from pyiceberg.exceptions import CommitFailedException

        catalog = self._catalog()
        for retry in range(CONFLICT_RETRIES):
            table = catalog.load_table(self.table_name)
            settled = self._settled(table, vote)
            if settled is not None:
                return settled
            faults.fault_point(BEFORE_SNAPSHOT)
            try:
                replaced = self._append(table, vote)
            except CommitFailedException as exc:
                log.info("%s: commit conflict (%s); refreshing the table, try %d", self._what(vote.batch_seq), exc, retry + 2)
                time.sleep(0.05 * 2**retry)
                continue
            faults.fault_point(AFTER_SNAPSHOT)
            self._clean_up(table, vote)
            snapshot = self._snapshot_of(catalog.load_table(self.table_name), vote.batch_seq)
            more = f", replacing batch {BatchId(vote.payload['replaces'])} ({replaced} files removed)" if replaced is not None else ""
            return Result(Outcome.DONE, f"{len(vote.payload['files'])} data files, {vote.records} rows committed "
                          f"in snapshot {snapshot.snapshot_id if snapshot else '?'}{more}")
        return Result(Outcome.RETRY_LATER, f"{self._what(vote.batch_seq)}: {CONFLICT_RETRIES} commits in a row lost "
                      "to concurrent writers of the table; retry")

    def _append(self, table, vote: Vote) -> int | None:
        """Commit the snapshot: the vote's files added, and those of the batch it
        replaces removed. The number of files removed (None: it replaces nothing)."""
        metadata = table.metadata
        added = [data_files.decode(f, metadata.default_spec_id, metadata.format_version) for f in vote.payload["files"]]
        summary = {PIPELINE_KEY: self.pipeline, SINK_KEY: self.name,
                   BATCH_KEY: str(BatchId(vote.batch_seq)), ATTEMPT_KEY: str(vote.attempt)}
        replaces = vote.payload.get("replaces")
        # pyiceberg would retry a conflict itself, appending the files again to the refreshed table
        # without asking whether the batch landed meanwhile (a racing commit of the same vote): a
        # duplicate. Off for this commit only (not stored); _commit's loop asks first, then retries.
        table.metadata = table.metadata.model_copy(
            update={"properties": {**metadata.properties, NO_COMMIT_RETRIES[0]: NO_COMMIT_RETRIES[1]}})
        with table.transaction() as transaction:
            if replaces is None:
                with transaction.update_snapshot(snapshot_properties=summary).fast_append() as append:
                    for data_file in added:
                        append.append_data_file(data_file)
                return None
            removed = self._files_of(table, int(replaces))
            summary[REPLACES_KEY] = str(BatchId(int(replaces)))
            with transaction.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
                for data_file in removed:
                    overwrite.delete_data_file(data_file)
                for data_file in added:
                    overwrite.append_data_file(data_file)
        return len(removed)

    def _files_of(self, table, seq: int) -> list:
        """The data files of committed batch ``seq`` in the table's current snapshot."""
        prefix = tables.batch_dir(table.location(), self.pipeline, self.name, seq) + "/"
        found = [task.file for task in table.scan().plan_files() if task.file.file_path.startswith(prefix)]
        snapshot = self._snapshot_of(table, seq)
        if not found and snapshot is not None and int(snapshot.summary["added-data-files"] or 0) > 0:
            raise ValueError(f"{self._what(seq)}, which this batch replaces, has no data file left in the table's "
                             f"current snapshot under {prefix}: a rewrite (compaction) moved its rows, so they cannot "
                             "be removed by file. Nothing was changed: remove them with a row filter, then retry")
        return found

    def _clean_up(self, table, vote: Vote) -> None:
        """Delete what the batch wrote beyond its vote: other attempts' directories and
        files of failed task attempts. Idempotent; a crash here only leaves unreferenced files."""
        keep = {f["path"] for f in vote.payload["files"]}
        root = tables.batch_dir(table.location(), self.pipeline, self.name, vote.batch_seq)
        for path in _list_files(table.io, root):
            if path not in keep:
                table.io.delete(path)

    @staticmethod
    def _delete_dir(io, uri: str) -> bool:
        """Delete directory ``uri`` and everything in it; False if it held no file."""
        if not _list_files(io, uri):
            return False
        scheme, netloc, path = io.parse_location(uri, io.properties)
        io.fs_by_scheme(scheme, netloc).delete_dir(path)
        return True


def _list_files(io, uri: str) -> list[str]:
    """Every file under directory ``uri``, as URIs of the same scheme."""
    from pyarrow import fs

    scheme, netloc, path = io.parse_location(uri, io.properties)
    filesystem = io.fs_by_scheme(scheme, netloc)
    infos = filesystem.get_file_info(fs.FileSelector(path, recursive=True, allow_not_found=True))
    base = uri.rstrip("/")
    return [base + info.path[len(path.rstrip("/")):] for info in infos if info.type == fs.FileType.File]


def _is_transient(exc: Exception) -> bool:
    """A catalog database busy or unreachable (SQLAlchemy's OperationalError)."""
    if isinstance(exc, (FileNotFoundError, PermissionError)):
        return False
    return type(exc).__name__ == "OperationalError" or isinstance(exc, OSError)
