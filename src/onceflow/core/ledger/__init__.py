"""The durable per-pipeline ledger (docs/protocol.md, "The ledger").

- ``storage``: ``LedgerStorage``, the ledger's keys on an ``onceflow.storage``
  storage, and ``open_ledger_storage``.
- ``records``: the records and their checksummed envelope.
- ``ledger``: ``BatchLedger``, typed access to one pipeline's records.
"""

from onceflow.core.ledger.errors import LedgerCorruptError, LedgerError, LedgerFormatError, LedgerUnavailable
from onceflow.core.ledger.ledger import BATCH_EFFECT, BatchLedger
from onceflow.core.ledger.records import Decision, DecisionOutcome, DoneMarker, Head
from onceflow.core.ledger.storage import LedgerStorage, deployment_ledger_storage, open_ledger_storage

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
    "deployment_ledger_storage",
    "open_ledger_storage",
]
