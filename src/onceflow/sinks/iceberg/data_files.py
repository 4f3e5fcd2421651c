"""A data file's Iceberg metadata as plain JSON, so that a vote can carry it.

The Spark task that wrote a file knows its statistics (record count, column
sizes, value and null counts, bounds): the vote carries them, and the commit
adds the file to a snapshot without reading it again. Bounds are bytes
(Iceberg's single-value serialisation), kept as base64.
"""

from __future__ import annotations

import base64
from typing import Any, Mapping

# DataFile fields that hold {field id: count} and {field id: bytes}.
_COUNTS = ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts")
_BOUNDS = ("lower_bounds", "upper_bounds")


def encode(data_file, spec_id: int) -> dict[str, Any]:
    """A pyiceberg ``DataFile`` (content DATA, Parquet), written in partition spec ``spec_id``, as JSON-able data."""
    partition = [data_file.partition[i] for i in range(len(data_file.partition))]
    for value in partition:
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise ValueError(f"{data_file.file_path}: partition value {value!r} ({type(value).__name__}) is not "
                             "supported by onceflow's iceberg sink: partition by columns or transforms of plain values")
    raw: dict[str, Any] = {
        "path": data_file.file_path,
        "size": data_file.file_size_in_bytes,
        "rows": data_file.record_count,
        "partition": partition,
        "spec_id": spec_id,
        "split_offsets": list(data_file.split_offsets or []),
    }
    for name in _COUNTS:
        raw[name] = {str(k): v for k, v in (getattr(data_file, name) or {}).items()}
    for name in _BOUNDS:
        raw[name] = {str(k): base64.b64encode(v).decode() for k, v in (getattr(data_file, name) or {}).items()}
    return raw


def decode(raw: Mapping[str, Any], format_version: int):
    """The ``DataFile`` that ``encode`` gave ``raw`` for."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    data_file = DataFile.from_args(
        _table_format_version=format_version,
        content=DataFileContent.DATA,
        file_path=raw["path"],
        file_format=FileFormat.PARQUET,
        partition=Record(*raw["partition"]),
        record_count=int(raw["rows"]),
        file_size_in_bytes=int(raw["size"]),
        split_offsets=list(raw["split_offsets"]) or None,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **{name: {int(k): int(v) for k, v in raw[name].items()} for name in _COUNTS},
        **{name: {int(k): base64.b64decode(v) for k, v in raw[name].items()} for name in _BOUNDS},
    )
    data_file.spec_id = int(raw["spec_id"])
    return data_file
