"""The durable per-pipeline ledger (docs/protocol.md, "The ledger").

- ``storage``: ``LedgerStorage``, the ledger's keys on an ``onceflow.storage``
  storage, and ``open_ledger_storage``.
- ``records``: the records and their checksummed envelope.
- ``ledger``: ``BatchLedger``, typed access to one pipeline's records.
"""

from .errors import LedgerCorruptError, LedgerError, LedgerFormatError, LedgerUnavailable
from .ledger import BATCH_EFFECT, BatchLedger
from .records import Decision, DecisionOutcome, DoneMarker, Head
from .storage import LedgerStorage, open_ledger_storage

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
