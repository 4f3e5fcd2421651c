"""Parquet file sinks on local, Hadoop and S3 storage (DESIGN.md §5)."""

from .entries import FileEntry, Manifest
from .reader import committed_files, committed_manifests, read_committed
from .sink import FileSink
from .staged_writer import write_staged_parquet
from ..storage import MissingStagedFile, Storage, storage_for  # noqa: F401  (re-exported)

__all__ = [
    "FileEntry",
    "FileSink",
    "Manifest",
    "MissingStagedFile",
    "Storage",
    "committed_files",
    "committed_manifests",
    "read_committed",
    "storage_for",
    "write_staged_parquet",
]
