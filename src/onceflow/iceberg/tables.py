"""The catalog of an Iceberg sink, its table, and where a batch writes its files.

A sink's table is created on first use, from the schema of the first batch's
DataFrame and the sink's ``partition_by``; later batches must match it (a
schema change is the user's to make, with the table's own schema evolution).
Each batch attempt writes under its own directory in the table's data path::

    <table location>/data/onceflow/<pipeline>/<sink>/<batch id>/a<attempt>/<partition path>/<file>

so a batch's files, voted or not, are found without listing the table, and
abort removes exactly them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from ..protocol.batch_id import BatchId
from ..settings import ConfigurationError

# pyiceberg's data file writer puts a table's files under this property's path.
WRITE_DATA_PATH = "write.data.path"
# "day(window_start)", "bucket[16](page)", or a bare column (identity).
_FIELD = re.compile(r"^\s*(?:(?P<transform>[a-z]+(?:\[\d+\])?)\((?P<column>[^()]+)\)|(?P<bare>[^()]+))\s*$")


@dataclass(frozen=True)
class PartitionField:
    column: str
    transform: str  # Iceberg's name of the transform: identity, day, hour, bucket[16], ...

    @property
    def name(self) -> str:
        """The partition field's name, as Spark names it (``window_start_day``)."""
        return self.column if self.transform == "identity" else f"{self.column}_{self.transform.split('[')[0]}"


def partition_fields(partition_by: tuple[str, ...], what: str) -> list[PartitionField]:
    """``partition_by`` parsed; a ConfigurationError for ``what`` names an entry that is not valid."""
    from pyiceberg.transforms import UnknownTransform, parse_transform

    fields = []
    for entry in partition_by:
        match = _FIELD.match(entry)
        if match is None:
            raise ConfigurationError(f"{what}: partition_by entry {entry!r} is not valid: give a column "
                                     "('page') or a transform of one ('day(window_start)', 'bucket[16](page)')")
        transform = match["transform"] or "identity"
        try:
            known = not isinstance(parse_transform(transform), UnknownTransform)
        except ValueError:
            known = False
        if not known:
            raise ConfigurationError(f"{what}: partition_by entry {entry!r}: {transform!r} is not an Iceberg "
                                     "transform (identity, year, month, day, hour, bucket[N], truncate[N])")
        fields.append(PartitionField((match["column"] or match["bare"]).strip(), transform))
    return fields


def open_catalog(conn_id: str, properties: Mapping[str, str]):
    from pyiceberg.catalog import load_catalog

    return load_catalog(conn_id, **properties)


def batch_dir(table_location: str, pipeline: str, sink: str, batch_seq: int) -> str:
    return f"{table_location.rstrip('/')}/data/onceflow/{pipeline}/{sink}/{BatchId(batch_seq)}"


def attempt_dir(table_location: str, pipeline: str, sink: str, batch_seq: int, attempt: int) -> str:
    return f"{batch_dir(table_location, pipeline, sink, batch_seq)}/a{attempt}"


def prepared_table(catalog, identifier: str, arrow_schema, partition_by: tuple[str, ...], what: str):
    """The table ``identifier``: created (with its namespace) from ``arrow_schema``
    and ``partition_by`` if absent; if present, checked to take ``arrow_schema``."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible
    from pyiceberg.transforms import parse_transform

    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        fields = partition_fields(partition_by, what)
        unknown = sorted({f.column for f in fields} - set(arrow_schema.names))
        if unknown:
            raise ConfigurationError(f"{what}: partition_by names {unknown}, which the output does not have "
                                     f"(its columns: {', '.join(arrow_schema.names)})") from None
        namespace = identifier.rpartition(".")[0]
        if not namespace:
            raise ConfigurationError(f"{what}: table {identifier!r} has no namespace: name it 'namespace.table'") from None
        catalog.create_namespace_if_not_exists(namespace)
        try:
            creation = catalog.create_table_transaction(identifier, schema=arrow_schema)
            with creation.update_spec() as spec:
                for field in fields:
                    spec.add_field(field.column, parse_transform(field.transform), field.name)
            return creation.commit_transaction()
        except TableAlreadyExistsError:  # another batch's job created it first
            table = catalog.load_table(identifier)
    try:
        _check_pyarrow_schema_compatible(table.schema(), arrow_schema, format_version=table.format_version)
    except ValueError as exc:
        raise ConfigurationError(
            f"{what}: the output's columns do not fit table {identifier!r} ({exc}). Evolve the table's schema "
            "(pyiceberg update_schema, or ALTER TABLE in Spark) or change the transform; nothing was written"
        ) from None
    return table


def write_data_files(table, pipeline: str, sink: str, batch_seq: int, attempt: int, rows) -> list[dict]:
    """``rows`` (a pyarrow Table) as data files of ``table`` under the batch attempt's
    directory, with pyiceberg's own writer (field ids, the table's partitioning and
    Parquet settings); what each is (``data_files.encode``). Nothing references them yet."""
    import uuid

    from pyiceberg.io.pyarrow import _dataframe_to_data_files  # what Table.append writes with

    from . import data_files

    if not rows.num_rows:
        return []
    where = attempt_dir(table.location(), pipeline, sink, batch_seq, attempt)
    metadata = table.metadata.model_copy(update={"properties": {**table.metadata.properties, WRITE_DATA_PATH: where}})
    # A fresh uuid per call: a task attempt's files never take another attempt's names.
    return [data_files.encode(f) for f in _dataframe_to_data_files(metadata, rows, table.io, write_uuid=uuid.uuid4())]
