"""One storage layer for everything onceflow writes: the ledger, the file
sinks and the Kafka sinks' staged copies (``base.Storage``; one module per
kind of storage; ``storage_for`` picks one by URI)."""

from onceflow.storage.base import MissingStagedFile, Storage, join
from onceflow.storage.backends import storage_for, warehouse_storage, warehouse_storage_options
from onceflow.storage.digesting import DigestingWriter

__all__ = ["DigestingWriter", "MissingStagedFile", "Storage", "join", "storage_for", "warehouse_storage", "warehouse_storage_options"]
