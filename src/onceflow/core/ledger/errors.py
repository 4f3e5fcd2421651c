"""Errors of the ledger. Each message names the pipeline, the batch, the file
and what to do, because a user meets them in an Airflow task log."""

from __future__ import annotations


class LedgerError(RuntimeError):
    """Base class of every ledger error."""


class LedgerUnavailable(LedgerError):
    """The ledger's storage cannot be reached or refuses access.

    Transient from onceflow's point of view: nothing was decided, so the task
    can be retried once the storage is back."""


class LedgerCorruptError(LedgerError):
    """A ledger file is unreadable, truncated, or was edited by hand (its
    checksum does not match). onceflow never guesses past such a file."""


class LedgerFormatError(LedgerError):
    """A ledger file was written by a newer onceflow, or by an older one
    whose format this version no longer reads."""
