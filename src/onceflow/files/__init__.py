"""Parquet file sinks on local, Hadoop and S3 storage (docs/protocol.md, "Files").

The names below load on first use: DAG parsing imports this package (through
the ``files`` sink kind) and must not pay for pyarrow.
"""

import importlib

_EXPORTS = {
    "FileEntry": ".entries",
    "Manifest": ".entries",
    "committed_files": ".reader",
    "committed_manifests": ".reader",
    "read_committed": ".reader",
    "FileSink": ".sink",
    "write_staged_parquet": ".staged_writer",
    "MissingStagedFile": "..storage",
    "Storage": "..storage",
    "storage_for": "..storage",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
