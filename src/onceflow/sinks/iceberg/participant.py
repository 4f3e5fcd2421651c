"""The Iceberg sink participant: a batch is committed as one table snapshot.

Call sequence (see onceflow.core.participant)::

    Spark task attempt      writes Parquet data files under the batch attempt's directory
                            (tables.attempt_dir); no snapshot references them
    vote_for(...)  -> Vote  once per job: the files and their statistics (data_files)
    verify(vote)   -> Result  Airflow worker: every voted file is there with its size, in
                            the table's current partition spec; a batch it replaces is whole
    commit(vote)   -> Result  one snapshot adding every voted file (and, replacing a
                            batch, removing that batch's files), its summary naming the
                            pipeline, sink, batch, plan and attempt; any number of times
    abort(plan, votes)       deletes the batch's directory, which no snapshot references

The snapshot is the commit point: readers of the table (Spark, Trino, DuckDB,
pyiceberg) see all of a batch or none of it. A commit first looks for its
batch in the table's snapshots, so a repeated or racing commit finds the one
snapshot and reports ALREADY_DONE; a conflict with any other writer is
retried on the refreshed table. The table's snapshots of batches whose commit
has not finished must be kept (expiring them loses that record); those of
finished batches may be expired: the ledger, not the table, says a batch is done.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from onceflow.core import faults
from onceflow.core.batch_id import BatchId
from onceflow.core.participant import Outcome, Participant, Result, Vote
from onceflow.core.plan import Plan
from onceflow.sinks.iceberg import data_files, tables
from onceflow.sinks.votes import PayloadFormat, UnreadablePayload

log = logging.getLogger(__name__)

BEFORE_SNAPSHOT = faults.declare("iceberg.commit.before_snapshot", "iceberg sink commit: no snapshot committed yet")
AFTER_SNAPSHOT = faults.declare("iceberg.commit.after_snapshot",
                                "iceberg sink commit: snapshot committed, files of other attempts not deleted")
# The snapshot summary keys that tie a snapshot to its batch.
PIPELINE_KEY = "onceflow.pipeline"
SINK_KEY = "onceflow.sink"
BATCH_KEY = "onceflow.batch"
PLANNED_AT_KEY = "onceflow.planned-at"
ATTEMPT_KEY = "onceflow.attempt"
REPLACES_KEY = "onceflow.replaces"
# A concurrent writer's commit makes ours fail its requirement check: refresh and try again.
CONFLICT_RETRIES = 10
NO_COMMIT_RETRIES = ("commit.retry.num-retries", "0")  # pyiceberg's TableProperties.COMMIT_NUM_RETRIES


# Version 1: the table, its location, when the batch was planned and the data files; payloads written
# before versions are version 1.
ICEBERG_PAYLOAD = PayloadFormat("iceberg", 1)


class NotCommittable(Exception):
    """The vote cannot be committed to the table as it is now: the message says why and what to do."""


def outcome_of(exc: Exception) -> Outcome:
    """What a failure of the catalog or the storage means for the call that met it:
    RETRY_LATER when trying again can succeed, FAILED when a human must act."""
    from pyiceberg import exceptions as ice

    for kinds, outcome in (
        # A lost race, or a catalog busy or down: the same call can succeed later.
        ((ice.CommitFailedException, ice.CommitStateUnknownException, ice.ServiceUnavailableError, ice.ServerError,
          ice.TooManyRequestsError, ice.WaitingForLockException, ConnectionError, TimeoutError), Outcome.RETRY_LATER),
        # Wrong credentials, permissions, a missing table or file: retrying changes nothing.
        ((ice.NoSuchTableError, ice.UnauthorizedError, ice.ForbiddenError, ice.AuthorizationExpiredError,
          ice.BadRequestError, ice.OAuthError, FileNotFoundError, PermissionError), Outcome.FAILED),
    ):
        if isinstance(exc, kinds):
            return outcome
    text = str(exc).lower()
    if type(exc).__name__ == "OperationalError":  # SQLAlchemy: the SQL catalog's database
        return Outcome.RETRY_LATER if any(m in text for m in ("locked", "timeout", "timed out", "could not connect",
                                                                "connection refused")) else Outcome.FAILED
    if isinstance(exc, OSError):  # pyarrow's storage errors
        return Outcome.FAILED if any(m in text for m in ("access denied", "access_denied", "forbidden")) else Outcome.RETRY_LATER
    return Outcome.FAILED


class IcebergTableSink(Participant):
    """One Iceberg table output of pipeline ``pipeline``, in the catalog ``catalog_properties``
    describe (or return, when called: a missing catalog fails the call that needs it)."""

    def __init__(self, name: str, pipeline: str, table: str, catalog_conn_id: str,
                 catalog_properties: Mapping[str, str] | Callable[[], Mapping[str, str]]):
        self.name = name
        self.pipeline = pipeline
        self.table_name = table
        self.catalog_conn_id = catalog_conn_id
        self._catalog_properties = catalog_properties

    @property
    def catalog_properties(self) -> dict[str, str]:
        found = self._catalog_properties
        return dict(found() if callable(found) else found)

    # -- pre-commit side (what the Spark job needs) -------------------------

    def vote_for(self, batch_seq: int, planned_at_ms: int, attempt: int, table_location: str,
                 files: Iterable[Mapping[str, Any]], replaces: int | None = None) -> Vote:
        """The vote for the data files ``files`` (``data_files.encode``) that one
        successful attempt per Spark partition wrote under the attempt's directory."""
        entries = sorted(files, key=lambda f: f["path"])
        where = tables.attempt_dir(table_location, self.pipeline, self.name, batch_seq, planned_at_ms, attempt) + "/"
        for entry in entries:
            if not entry["path"].startswith(where):
                raise ValueError(f"{entry['path']} is not under {where}: it cannot be part of "
                                 f"batch {BatchId(batch_seq)} attempt {attempt}")
        payload = ICEBERG_PAYLOAD.write({"table": self.table_name, "location": table_location,
                                         "planned_at_ms": planned_at_ms, "files": entries})
        return Vote(self.name, batch_seq, attempt, payload, records=sum(int(f["rows"]) for f in entries),
                    replaces=replaces)

    # -- Participant ---------------------------------------------------------

    def verify(self, vote: Vote) -> Result:
        """DONE if the vote can be committed as it is; ALREADY_DONE if the batch is in
        a snapshot; FAILED (the batch is aborted and re-run) otherwise (I7). Read-only."""
        return self._guarded(vote, self._verify)

    def commit(self, vote: Vote) -> Result:
        """One snapshot with the vote's files. Idempotent: ALREADY_DONE when the
        batch's snapshot exists; a crash before it leaves the table unchanged."""
        return self._guarded(vote, self._commit)

    def abort(self, plan: Plan, votes: Sequence[Vote]) -> Result:
        """Delete the files every attempt of the batch wrote, voted or not.
        Refuses (FAILED) if a snapshot holds the batch: its decision is COMMIT."""
        from pyiceberg.exceptions import NoSuchTableError

        seq = plan.batch_seq
        try:
            table = self._catalog().load_table(self.table_name)
        except NoSuchTableError:  # created by the first batch's Spark job: this one died before
            return Result(Outcome.ALREADY_DONE, f"{self._what(seq)}: no table yet, so nothing was written")
        except Exception as exc:
            return self._error(seq, exc)
        try:
            snapshot = self._snapshot_of(table, seq, plan.created_at_ms)
            if snapshot is not None:
                return Result(Outcome.FAILED, f"{self._what(seq)} is committed (snapshot {snapshot.snapshot_id}); "
                              "refusing to abort it. Its decision is COMMIT: run the commit (recovery) instead")
            where = tables.batch_dir(table.location(), self.pipeline, self.name, seq, plan.created_at_ms)
            removed = _delete_dir(table.io, where)
        except Exception as exc:
            return self._error(seq, exc)
        return Result(Outcome.DONE if removed else Outcome.ALREADY_DONE)

    # -- internals -----------------------------------------------------------

    def _what(self, seq: int) -> str:
        return f"batch {BatchId(seq)} of iceberg sink {self.name} ({self.table_name})"

    def _catalog(self):
        return tables.open_catalog(self.catalog_conn_id, self.catalog_properties)

    def _error(self, seq: int, exc: Exception) -> Result:
        outcome = outcome_of(exc)
        hint = "retry" if outcome is Outcome.RETRY_LATER else "investigate the catalog and the table's storage"
        return Result(outcome, f"{self._what(seq)}: {type(exc).__name__}: {exc}; {hint}")

    def _guarded(self, vote: Vote, step) -> Result:
        try:
            vote = replace(vote, payload=ICEBERG_PAYLOAD.read(vote.payload))
        except UnreadablePayload as exc:
            return Result(Outcome.FAILED, f"{self._what(vote.batch_seq)} attempt {vote.attempt}: {exc}")
        if vote.participant != self.name or vote.payload.get("table") != self.table_name:
            return Result(Outcome.FAILED, f"vote of {vote.participant} for table {vote.payload.get('table')} "
                          f"handed to iceberg sink {self.name} of {self.table_name}: wrong participant")
        try:
            return step(vote)
        except Exception as exc:
            return self._error(vote.batch_seq, exc)

    def _batch_snapshots(self, table, seq: int) -> list:
        """Snapshots of this pipeline's sink naming batch ``seq`` (of any ledger), oldest first."""
        return [s for s in table.metadata.snapshots if s.summary is not None and s.summary[BATCH_KEY] == str(BatchId(seq))
                and s.summary[SINK_KEY] == self.name and s.summary[PIPELINE_KEY] == self.pipeline]

    def _snapshot_of(self, table, seq: int, planned_at_ms: int):
        """The snapshot that committed batch ``seq`` as planned at ``planned_at_ms``, or None."""
        found = [s for s in self._batch_snapshots(table, seq) if s.summary[PLANNED_AT_KEY] == str(planned_at_ms)]
        return found[0] if found else None

    def _settled(self, table, vote: Vote) -> Result | None:
        """ALREADY_DONE (after cleaning up) if the batch is in a snapshot of this very
        vote, FAILED if of another attempt or other files, None if it is not committed."""
        snapshot = self._snapshot_of(table, vote.batch_seq, vote.payload["planned_at_ms"])
        if snapshot is None:
            return None
        committed = {f.file_path for f in _files_added_by(table, snapshot)}
        if snapshot.summary[ATTEMPT_KEY] != str(vote.attempt) or committed != {f["path"] for f in vote.payload["files"]}:
            return Result(Outcome.FAILED, f"{self._what(vote.batch_seq)} is committed by attempt "
                          f"{snapshot.summary[ATTEMPT_KEY]} with {len(committed)} files (snapshot {snapshot.snapshot_id}), "
                          f"not by this vote of attempt {vote.attempt} with {len(vote.payload['files'])}: a batch has one "
                          "decision (I2). Investigate the ledger; nothing was changed")
        self._clean_up(table, vote)
        return Result(Outcome.ALREADY_DONE, f"{self._what(vote.batch_seq)} was already committed "
                      f"(snapshot {snapshot.snapshot_id})")

    def _committable(self, table, vote: Vote) -> list | None:
        """The files of the batch the vote replaces (None: it replaces nothing), once the
        vote is known to fit ``table`` as it is now; NotCommittable says why it does not."""
        spec_id = table.metadata.default_spec_id
        for entry in vote.payload["files"]:
            if int(entry["spec_id"]) != spec_id:
                raise NotCommittable(f"data file {entry['path']} was written in partition spec {entry['spec_id']}, the "
                                     f"table's is now {spec_id} (the partitioning changed). Abort the batch and re-run it")
            found = table.io.new_input(entry["path"])
            size = len(found) if found.exists() else None
            if size != entry["size"]:
                state = "is missing" if size is None else f"has {size} bytes, the vote recorded {entry['size']}"
                raise NotCommittable(f"data file {entry['path']} {state}. Abort the batch and re-run it (its offsets "
                                     "did not move)")
        return None if vote.replaces is None else self._replaced_files(table, vote.replaces)

    def _verify(self, vote: Vote) -> Result:
        table = self._catalog().load_table(self.table_name)
        if self._snapshot_of(table, vote.batch_seq, vote.payload["planned_at_ms"]) is not None:
            return Result(Outcome.ALREADY_DONE, f"{self._what(vote.batch_seq)} is already committed")
        try:
            self._committable(table, vote)
        except NotCommittable as exc:
            return Result(Outcome.FAILED, f"{self._what(vote.batch_seq)} attempt {vote.attempt}: {exc}")
        return Result(Outcome.DONE, f"{len(vote.payload['files'])} data files, {vote.records} rows written")

    def _commit(self, vote: Vote) -> Result:
        from pyiceberg.exceptions import CommitFailedException

        catalog = self._catalog()
        for retry in range(CONFLICT_RETRIES):
            table = catalog.load_table(self.table_name)
            settled = self._settled(table, vote)
            if settled is not None:
                return settled
            try:
                replaced = self._committable(table, vote)
            except NotCommittable as exc:  # after the COMMIT decision: nothing may be half done, a human must look (I7)
                return Result(Outcome.FAILED, f"{self._what(vote.batch_seq)} attempt {vote.attempt}: {exc}; "
                              "nothing was committed to the table")
            faults.fault_point(BEFORE_SNAPSHOT)
            try:
                self._append(table, vote, replaced)
            except CommitFailedException as exc:
                log.info("%s: commit conflict (%s); refreshing the table, try %d", self._what(vote.batch_seq), exc, retry + 2)
                time.sleep(0.05 * 2**retry)
                continue
            faults.fault_point(AFTER_SNAPSHOT)
            self._clean_up(table, vote)
            snapshot = self._snapshot_of(catalog.load_table(self.table_name), vote.batch_seq, vote.payload["planned_at_ms"])
            more = f", replacing batch {BatchId(vote.replaces)} ({len(replaced)} files removed)" if replaced is not None else ""
            return Result(Outcome.DONE, f"{len(vote.payload['files'])} data files, {vote.records} rows committed "
                          f"in snapshot {snapshot.snapshot_id if snapshot else '?'}{more}")
        return Result(Outcome.RETRY_LATER, f"{self._what(vote.batch_seq)}: {CONFLICT_RETRIES} commits in a row lost "
                      "to concurrent writers of the table; retry")

    def _append(self, table, vote: Vote, replaced: list | None) -> None:
        """Commit the snapshot: the vote's files added, and ``replaced`` (the files of the
        batch it replaces, if any) removed."""
        metadata = table.metadata
        added = [data_files.decode(f, metadata.format_version) for f in vote.payload["files"]]
        summary = {PIPELINE_KEY: self.pipeline, SINK_KEY: self.name, BATCH_KEY: str(BatchId(vote.batch_seq)),
                   PLANNED_AT_KEY: str(vote.payload["planned_at_ms"]), ATTEMPT_KEY: str(vote.attempt)}
        # pyiceberg would retry a conflict itself, appending the files again to the refreshed table
        # without asking whether the batch landed meanwhile (a racing commit of the same vote): a
        # duplicate. Off for this commit only (not stored); _commit's loop asks first, then retries.
        table.metadata = metadata.model_copy(
            update={"properties": {**metadata.properties, NO_COMMIT_RETRIES[0]: NO_COMMIT_RETRIES[1]}})
        with table.transaction() as transaction:
            if replaced is None:
                with transaction.update_snapshot(snapshot_properties=summary).fast_append() as append:
                    for data_file in added:
                        append.append_data_file(data_file)
                return
            summary[REPLACES_KEY] = str(BatchId(vote.replaces))
            with transaction.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
                for data_file in replaced:
                    overwrite.delete_data_file(data_file)
                for data_file in added:
                    overwrite.append_data_file(data_file)

    def _replaced_files(self, table, seq: int) -> list:
        """The data files of committed batch ``seq``, which a vote replaces: exactly the
        files its snapshot added, all still in the table. NotCommittable otherwise: its
        rows could not all be removed by file, and the replacement would duplicate them."""
        snapshots = self._batch_snapshots(table, seq)
        if not snapshots:
            raise NotCommittable(
                f"batch {BatchId(seq)}, which this batch replaces, has no snapshot in the table's history (expired, "
                "or this output was added to the pipeline after it): which rows are its cannot be told. Abort; then "
                "remove its rows with a row filter, or do not replace that interval")
        added = snapshots[-1]  # of this ledger: a ledger started afresh plans later than the one before
        expected = {f.file_path for f in _files_added_by(table, added)}
        prefix = tables.batch_dir(table.location(), self.pipeline, self.name, seq, int(added.summary[PLANNED_AT_KEY])) + "/"
        live = [task.file for task in table.scan().plan_files() if task.file.file_path.startswith(prefix)]
        if {f.file_path for f in live} != expected:
            raise NotCommittable(
                f"batch {BatchId(seq)}, which this batch replaces, is no longer its own {len(expected)} data files in "
                f"the table ({len(live)} of them left under {prefix}): a rewrite (compaction, a row-level delete or "
                "update) moved its rows, so they cannot be removed by file. Nothing was changed: remove them with a "
                "row filter, then re-run the replacement")
        return live

    def _clean_up(self, table, vote: Vote) -> None:
        """Delete what the batch wrote beyond its vote: other attempts' directories and
        files of failed task attempts. Best effort: what is left is referenced by no
        snapshot (a table's orphan file removal finds it), and the batch is committed."""
        keep = {f["path"] for f in vote.payload["files"]}
        root = tables.batch_dir(table.location(), self.pipeline, self.name, vote.batch_seq, vote.payload["planned_at_ms"])
        try:
            for path in _list_files(table.io, root):
                if path not in keep:
                    table.io.delete(path)
        except Exception as exc:
            log.warning("%s: committed, but the files it wrote beyond its vote under %s were not all deleted (%s: %s); "
                        "no snapshot references them", self._what(vote.batch_seq), root, type(exc).__name__, exc)


def _files_added_by(table, snapshot) -> list:
    """The data files ``snapshot`` added, from its own manifests."""
    from pyiceberg.manifest import ManifestEntryStatus

    return [entry.data_file
            for manifest in snapshot.manifests(table.io) if manifest.added_snapshot_id == snapshot.snapshot_id
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False)
            if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot.snapshot_id]


def _filesystem(io, uri: str):
    """(pyarrow filesystem, path) of ``uri`` through the table's FileIO."""
    if not hasattr(io, "fs_by_scheme"):
        raise PermissionError(f"the table's FileIO is {type(io).__name__}: onceflow's iceberg sink lists and deletes a "
                              "batch's files with pyiceberg's PyArrowFileIO; remove py-io-impl from the catalog's properties")
    scheme, netloc, path = io.parse_location(uri, io.properties)
    return io.fs_by_scheme(scheme, netloc), path


def _list_files(io, uri: str) -> list[str]:
    """Every file under directory ``uri``, as URIs of the same scheme."""
    from pyarrow import fs

    filesystem, path = _filesystem(io, uri)
    infos = filesystem.get_file_info(fs.FileSelector(path, recursive=True, allow_not_found=True))
    base = uri.rstrip("/")
    return [base + info.path[len(path.rstrip("/")):] for info in infos if info.type == fs.FileType.File]


def _delete_dir(io, uri: str) -> bool:
    """Delete directory ``uri`` and everything in it; False if it held no file."""
    if not _list_files(io, uri):
        return False
    filesystem, path = _filesystem(io, uri)
    filesystem.delete_dir(path)
    return True
