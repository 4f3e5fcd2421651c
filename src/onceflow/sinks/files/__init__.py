"""The files sink kind: Parquet files on local, Hadoop and S3 storage (docs/protocol.md, "Files").

- ``kind``: the kind (``SinkKind``), what the registry loads;
- ``data_source``: the Spark data source that stages a batch's files (pre-commit, executors);
- ``layout``: staging, ``batch=<id>/`` and manifests under a sink's location;
- ``participant``: promotes staged files and publishes the manifest (commit task);
- ``reader``: what readers see, through the manifests.

The names below load on first use: DAG parsing imports this package (through
the kind) and must not pay for pyarrow.
"""

import importlib

_EXPORTS = {
    "FileEntry": "onceflow.sinks.files.entries",
    "Manifest": "onceflow.sinks.files.entries",
    "committed_files": "onceflow.sinks.files.reader",
    "committed_manifests": "onceflow.sinks.files.reader",
    "read_committed": "onceflow.sinks.files.reader",
    "FileSink": "onceflow.sinks.files.participant",
    "write_staged_parquet": "onceflow.sinks.files.staged_writer",
    "MissingStagedFile": "onceflow.storage",
    "Storage": "onceflow.storage",
    "storage_for": "onceflow.storage",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
