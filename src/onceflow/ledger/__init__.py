"""The durable per-pipeline ledger (DESIGN.md §3).

- ``storage``: the LedgerStorage interface and ``open_ledger_storage``;
  backends in ``local``, ``hadoop`` and ``s3``.
- ``records``: the records and their checksummed envelope.
- ``ledger``: ``BatchLedger``, typed access to one pipeline's records.
"""

from .errors import LedgerCorruptError, LedgerError, LedgerFormatError, LedgerUnavailable
from .ledger import BATCH_EFFECT, BatchLedger
from .records import Decision, DecisionOutcome, DoneMarker, Head
from .backends import open_ledger_storage
from .storage import LedgerStorage

__all__ = [
    "BATCH_EFFECT",
    "BatchLedger",
    "Decision",
    "DecisionOutcome",
    "DoneMarker",
    "Head",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerFormatError",
    "LedgerStorage",
    "LedgerUnavailable",
    "open_ledger_storage",
]
