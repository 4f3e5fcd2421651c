"""One storage layer for everything onceflow writes: the ledger, the file
sinks and the Kafka sinks' staged copies (``base.Storage``; one module per
kind of storage; ``storage_for`` picks one by URI)."""

from .base import MissingStagedFile, Storage, join
from .backends import storage_for

__all__ = ["MissingStagedFile", "Storage", "join", "storage_for"]
