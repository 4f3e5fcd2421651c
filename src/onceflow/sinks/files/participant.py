"""The file sink participant: Parquet files staged per batch attempt, promoted on COMMIT.

Call sequence (see onceflow.core.participant)::

    stage(...)                 -> FileEntry   Spark executor, once per task attempt
    vote_for(batch, attempt, entries) -> Vote Spark data source commit (one per job)
    verify(vote)               -> Result      Airflow worker, before the decision
    commit(vote)               -> Result      Airflow worker, after COMMIT; any number of times
    abort(plan, votes)         -> Result      Airflow worker, after ABORT; any number of times

Commit promotes exactly the files the vote names (layout.py has the paths):
``publish`` (rename on local/Hadoop), or on S3, where each file was written
as a pending multipart upload to its committed name, one completion per file
(no bytes copied, whatever the size); a size check of every promoted file,
then the ``_SUCCESS`` manifest, created if absent and written LAST, then
staging (and every pending upload) of every attempt of the batch is removed. A crash
anywhere leaves either no manifest (the batch is invisible; the next commit
resumes) or the manifest (the batch is committed; the next commit only
cleans up). Files of task attempts the vote does not name are never promoted.

A batch that reprocesses a committed interval *replaces* that interval's
batch: its manifest names the batch it replaces, so the moment it is written
is the moment readers (``reader``) switch from the old batch to the new
one; the commit then removes the old batch, manifest first.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from onceflow.core import faults
from onceflow.core.participant import Outcome, Participant, Result, Vote
from onceflow.core.plan import Plan
from onceflow.sinks.files import layout
from onceflow.sinks.files.entries import FileEntry, Manifest
from onceflow.sinks.votes import PayloadFormat, UnreadablePayload
from onceflow.storage import MissingStagedFile, Storage, storage_for
from onceflow.storage.base import PendingStorage

BEFORE_PUBLISH = faults.declare("files.commit.before_publish", "file sink commit: nothing promoted yet")
AFTER_PUBLISH = faults.declare("files.commit.after_publish", "file sink commit: files promoted, no _SUCCESS manifest")
AFTER_MANIFEST = faults.declare("files.commit.after_manifest", "file sink commit: manifest written, staging not deleted")
BEFORE_RETRACT = faults.declare("files.commit.before_retract",
                                "file sink commit: manifest of a replacing batch written, the batch it replaces not removed")


# Version 1: the sink's URI and its files (``FileEntry``); payloads written before versions are version 1.
FILES_PAYLOAD = PayloadFormat("files", 1)


class FileSink(Participant):
    """One Parquet output of a pipeline rooted at ``sink_uri``."""

    def __init__(self, name: str, sink_uri: str, storage: Storage | None = None):
        self.name = name
        self.sink_uri = sink_uri.rstrip("/")
        self.storage = storage or storage_for(self.sink_uri)

    # -- pre-commit side (what the Spark job needs) -------------------------

    def staging_uri(self, batch_seq: int, attempt: int) -> str:
        return layout.attempt_staging(self.sink_uri, batch_seq, attempt)

    def stage(self, data, batch_seq: int, attempt: int, split: int, task_attempt: int = 0) -> FileEntry | None:
        """Executor: pre-commit one task attempt's rows as one Parquet file, pending at its committed
        name where the storage keeps files pending (S3), else under the attempt's staging."""
        from onceflow.sinks.files.staged_writer import write_staged_parquet  # pyarrow: not on the commit side

        pending = layout.batch_dir(self.sink_uri, batch_seq) if isinstance(self.storage, PendingStorage) else None
        return write_staged_parquet(data, self.staging_uri(batch_seq, attempt), split, self.storage,
                                    task_attempt=task_attempt, pending_dir=pending)

    def discard(self, entry: FileEntry) -> None:
        """Remove what a failed job's task attempt pre-committed (FileSink.abort removes the rest)."""
        if entry.upload is not None:
            self.storage.abort_upload(entry.path, entry.upload)
        else:
            self.storage.delete(entry.path)

    def vote_for(self, batch_seq: int, attempt: int, entries: Iterable[FileEntry], replaces: int | None = None) -> Vote:
        """The vote for the task attempts whose files are ``entries`` (replacing
        committed batch ``replaces``, for a reprocessed interval).

        Refuses two files for one split: Spark commits one attempt per
        partition, so a second file means a duplicate, and voting for it
        would commit that duplicate."""
        files = sorted(entries, key=lambda e: e.split)
        splits = [e.split for e in files]
        if len(set(splits)) != len(splits):
            dupes = sorted({s for s in splits if splits.count(s) > 1})
            raise ValueError(f"batch {layout.batch_id(batch_seq)} sink {self.name}: splits {dupes} "
                             "have files from more than one task attempt; refusing to vote for duplicates")
        staging, target = self.staging_uri(batch_seq, attempt), layout.batch_dir(self.sink_uri, batch_seq)
        for entry in files:
            if entry.path != layout.join(target if entry.upload is not None else staging, entry.name):
                raise ValueError(f"{entry.path} is not staged under {staging} nor pending in {target}: it cannot "
                                 f"be part of batch {layout.batch_id(batch_seq)} attempt {attempt}")
        payload = FILES_PAYLOAD.write({"sink_uri": self.sink_uri, "files": [e.to_dict() for e in files]})
        return Vote(self.name, batch_seq, attempt, payload, records=sum(e.rows for e in files), replaces=replaces)

    # -- Participant ---------------------------------------------------------

    def verify(self, vote: Vote) -> Result:
        """DONE if every file the vote names is still staged (or already
        promoted) with its recorded size; FAILED loudly otherwise (I7).
        Read-only, so any number of calls is fine."""
        return self._guarded(vote, self._verify)

    def commit(self, vote: Vote) -> Result:
        """Promote the vote's files and write the manifest. Idempotent: a
        committed batch gives ALREADY_DONE; a crash mid-way is resumed."""
        return self._guarded(vote, self._commit)

    def abort(self, plan: Plan, votes: Sequence[Vote]) -> Result:
        """Delete the staging of every attempt of the batch, including files
        of failed tasks that are in no vote (so ``votes`` is not needed).
        Idempotent: nothing left to delete gives ALREADY_DONE. Refuses
        (FAILED) if the batch is committed: deleting it would lose data."""
        seq = plan.batch_seq
        try:
            if self.storage.read_bytes(layout.manifest_path(self.sink_uri, seq)) is not None:
                return Result(Outcome.FAILED, f"{self._what(seq)} is committed "
                              f"({layout.manifest_path(self.sink_uri, seq)} exists); refusing to abort it. "
                              "Its decision is COMMIT: run the commit (recovery) instead")
            removed = self._remove_staging(seq)
        except Exception as exc:
            return self._error(seq, exc)
        return Result(Outcome.DONE if removed else Outcome.ALREADY_DONE)

    # -- internals -----------------------------------------------------------

    def _remove_staging(self, seq: int) -> bool:
        """Staging of every attempt of the batch, and every upload still pending in its directory
        (attempts no vote names, voted ones of an aborted batch): nothing is left stored or billed."""
        removed = self.storage.delete_tree(layout.batch_staging(self.sink_uri, seq))
        if isinstance(self.storage, PendingStorage):
            removed = self.storage.abort_pending(layout.batch_dir(self.sink_uri, seq)) > 0 or removed
        return removed

    def _what(self, seq: int) -> str:
        return f"batch {layout.batch_id(seq)} of file sink {self.name} ({self.sink_uri})"

    def _error(self, seq: int, exc: Exception) -> Result:
        if self.storage.is_transient(exc):
            return Result(Outcome.RETRY_LATER, f"{self._what(seq)}: storage unreachable ({exc}); retry")
        return Result(Outcome.FAILED, f"{self._what(seq)}: {type(exc).__name__}: {exc}")

    def _guarded(self, vote: Vote, step) -> Result:
        try:
            payload = FILES_PAYLOAD.read(vote.payload)
        except UnreadablePayload as exc:
            return Result(Outcome.FAILED, f"{self._what(vote.batch_seq)} attempt {vote.attempt}: {exc}")
        if vote.participant != self.name or payload.get("sink_uri", "").rstrip("/") != self.sink_uri:
            return Result(Outcome.FAILED, f"vote of {vote.participant} for {payload.get('sink_uri')} "
                          f"handed to file sink {self.name} at {self.sink_uri}: wrong participant")
        try:
            return step(vote, [FileEntry.from_dict(f) for f in payload.get("files", ())])
        except MissingStagedFile as exc:  # raised by publish, i.e. after the COMMIT decision
            return Result(Outcome.FAILED, f"{self._what(vote.batch_seq)} attempt {vote.attempt}: staged file "
                          f"lost: {exc}. Nothing of the batch was made visible, and its COMMIT cannot be "
                          "completed: restore the file and retry the commit, or investigate the storage (I7)")
        except Exception as exc:
            return self._error(vote.batch_seq, exc)

    def _verify(self, vote: Vote, entries: list[FileEntry]) -> Result:
        seq = vote.batch_seq
        if self.storage.read_bytes(layout.manifest_path(self.sink_uri, seq)) is not None:
            return Result(Outcome.ALREADY_DONE, f"{self._what(seq)} is already committed")
        promoted = self.storage.list_dir(layout.batch_dir(self.sink_uri, seq))
        staged = self.storage.list_dir(self.staging_uri(seq, vote.attempt))
        for entry in entries:
            size = staged.get(entry.name, promoted.get(entry.name))
            if entry.upload is not None and size is None and self.storage.pending_alive(entry.path, entry.upload):
                continue  # pending, as it was written: its parts hold the bytes the vote recorded
            if size != entry.size:
                found = "is missing" if size is None else f"has {size} bytes, the vote recorded {entry.size}"
                return Result(Outcome.FAILED, f"{self._what(seq)} attempt {vote.attempt}: staged file {entry.path} "
                              f"{found}. Abort the batch and re-run it (its offsets did not move)")
        return Result(Outcome.DONE, f"{len(entries)} files, {vote.records} rows staged")

    def _commit(self, vote: Vote, entries: list[FileEntry]) -> Result:
        seq = vote.batch_seq
        manifest = Manifest.of(self.name, seq, vote.attempt, entries, replaces=vote.replaces)
        manifest_path = layout.manifest_path(self.sink_uri, seq)
        existing = self.storage.read_bytes(manifest_path)
        if existing is not None:
            settled = self._settled(seq, manifest, existing, manifest_path)
            if settled is not None:
                return settled
        target = layout.batch_dir(self.sink_uri, seq)
        staged = [e.name for e in entries if e.upload is None]
        pending = [e for e in entries if e.upload is not None]
        faults.fault_point(BEFORE_PUBLISH)
        if staged or not pending:  # an empty batch publishes its (empty) staging too
            self.storage.publish(self.staging_uri(seq, vote.attempt), target, staged)
        for entry in pending:
            self.storage.complete_pending(entry.path, entry.upload)
        faults.fault_point(AFTER_PUBLISH)
        promoted = self.storage.list_dir(target)
        for entry in entries:
            if promoted.get(entry.name) != entry.size:
                return Result(Outcome.FAILED, f"{self._what(seq)}: promoted {layout.join(target, entry.name)} has "
                              f"{promoted.get(entry.name)} bytes, the vote recorded {entry.size}; no manifest "
                              "was written, the batch stays invisible. Investigate the storage")
        if not self.storage.create_if_absent(manifest_path, manifest.to_bytes()):
            settled = self._settled(seq, manifest, self.storage.read_bytes(manifest_path) or b"", manifest_path)
            if settled is not None:
                return settled
        faults.fault_point(AFTER_MANIFEST)
        self._remove_staging(seq)
        self._retract(manifest)
        replaced = f", replacing batch {layout.batch_id(manifest.replaces)}" if manifest.replaces is not None else ""
        return Result(Outcome.DONE, f"{len(entries)} files, {manifest.rows} rows promoted to {target}{replaced}")

    def _retract(self, manifest: Manifest) -> None:
        """Remove the batch ``manifest`` replaces, manifest first (a crash between the
        two leaves files no reader lists). Idempotent; nothing to do for most batches."""
        if manifest.replaces is None:
            return
        faults.fault_point(BEFORE_RETRACT)
        self.storage.delete(layout.manifest_path(self.sink_uri, manifest.replaces))
        self.storage.delete_tree(layout.batch_dir(self.sink_uri, manifest.replaces))

    def _settled(self, seq: int, manifest: Manifest, existing: bytes, path: str) -> Result | None:
        """Judge an existing manifest: ALREADY_DONE when it is ours, FAILED when
        it names other files, None (carry on) when it is torn and was removed."""
        if existing == manifest.to_bytes():
            self._remove_staging(seq)
            self._retract(manifest)
            return Result(Outcome.ALREADY_DONE, f"{self._what(seq)} was already committed")
        try:
            theirs = Manifest.from_bytes(existing)
        except (ValueError, KeyError, TypeError):
            # A manifest torn by a crash mid-write (Hadoop's create is not
            # atomic with its content): only a commit of this same decision
            # can have written it, so rewrite it.
            self.storage.delete(path)
            return None
        return Result(Outcome.FAILED, f"{self._what(seq)} is committed with other files than this vote "
                      f"names (attempt {theirs.attempt} vs {manifest.attempt}): a batch has one "
                      "decision (I2). Investigate the ledger; nothing was changed")
