"""The catalog of an Iceberg sink, its table, and where a batch writes its files.

A sink's table is created on first use, from the schema of the first batch's
DataFrame and the sink's ``partition_by``; later batches must match it (a
schema change is the user's to make, with the table's own schema evolution).
Each batch attempt writes under its own directory in the table's data path::

    <table location>/data/onceflow/<pipeline>/<sink>/<batch key>/a<attempt>/<partition path>/<file>

so a batch's files, voted or not, are found without listing the table, and
abort removes exactly them. The batch key is the batch id and the moment
its plan was written: a ledger started afresh (its batch ids begin at 1
again) never mistakes an earlier ledger's batch in the table for its own.
"""

from __future__ import annotations

import itertools
import logging
import re
import uuid
from dataclasses import dataclass
from typing import Mapping

from onceflow.core.batch_id import BatchId
from onceflow.config.settings import ConfigurationError
from onceflow.sinks.iceberg import data_files

log = logging.getLogger(__name__)
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
    """The catalog ``properties`` describe, named ``conn_id`` (the SQL catalog keys its
    tables by name). Unlike pyiceberg's ``load_catalog``, nothing is merged in from
    ``~/.pyiceberg.yaml`` or ``PYICEBERG_*`` variables: every process that opens the
    catalog of one connection opens the same one."""
    from pyiceberg.catalog import AVAILABLE_CATALOGS, CatalogType, infer_catalog_type, load_catalog

    props = dict(properties)
    if props.get("py-catalog-impl"):  # a catalog class of the user's own: pyiceberg imports it
        return load_catalog(conn_id, **props)
    kind = CatalogType(props["type"].lower()) if props.get("type") else infer_catalog_type(conn_id, props)
    return AVAILABLE_CATALOGS[kind](conn_id, props)


def batch_key(batch_seq: int, planned_at_ms: int) -> str:
    return f"{BatchId(batch_seq)}-{planned_at_ms}"


def batch_dir(table_location: str, pipeline: str, sink: str, batch_seq: int, planned_at_ms: int) -> str:
    return f"{table_location.rstrip('/')}/data/onceflow/{pipeline}/{sink}/{batch_key(batch_seq, planned_at_ms)}"


def attempt_dir(table_location: str, pipeline: str, sink: str, batch_seq: int, planned_at_ms: int, attempt: int) -> str:
    return f"{batch_dir(table_location, pipeline, sink, batch_seq, planned_at_ms)}/a{attempt}"


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
    wanted = [f.name for f in partition_fields(partition_by, what)]
    if wanted != [f.name for f in table.spec().fields]:
        log.warning("%s: table %s is partitioned by %s, not by partition_by=%s: partition_by only applies to a table "
                    "onceflow creates; the table's own spec is used", what, identifier, table.spec(), list(partition_by))
    try:
        _check_pyarrow_schema_compatible(table.schema(), arrow_schema, format_version=table.format_version)
    except ValueError as exc:
        raise ConfigurationError(
            f"{what}: the output's columns do not fit table {identifier!r} ({exc}). Evolve the table's schema "
            "(pyiceberg update_schema, or ALTER TABLE in Spark) or change the transform; nothing was written"
        ) from None
    return table


def write_data_files(table, pipeline: str, sink: str, batch_seq: int, planned_at_ms: int, attempt: int,
                     batches) -> list[dict]:
    """``batches`` (pyarrow record batches) as data files of ``table`` under the batch
    attempt's directory, with pyiceberg's own writer (field ids, the table's partitioning
    and Parquet settings); what each is (``data_files.encode``). Nothing references them
    yet. Streamed into files for an unpartitioned table; a partitioned one is split by
    partition in memory (pyiceberg's writer needs the whole Arrow table for that)."""
    import pyarrow as pa
    from pyiceberg.io.pyarrow import _dataframe_to_data_files  # what Table.append writes with

    batches = iter(batches)
    first = next((b for b in batches if b.num_rows), None)
    if first is None:
        return []
    rest = (b for b in batches if b.num_rows)
    if table.spec().is_unpartitioned():
        rows = pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], rest))
    else:
        rows = pa.Table.from_batches([first, *rest])
    where = attempt_dir(table.location(), pipeline, sink, batch_seq, planned_at_ms, attempt)
    metadata = table.metadata.model_copy(update={"properties": {**table.metadata.properties, WRITE_DATA_PATH: where}})
    # A fresh uuid per call: a task attempt's files never take another attempt's names.
    written = _dataframe_to_data_files(metadata, rows, table.io, write_uuid=uuid.uuid4())
    return [data_files.encode(f, metadata.default_spec_id) for f in written]
