"""``onceflow_committed_parquet``: Parquet files an output committed, read back for the audit.

Call sequence (Spark's DataSourceReader contract)::

    CommittedParquetDataSource.reader(schema)   driver: the files (``files`` option, JSON
                                                [[uri, batch id], ...]) and the schema the
                                                caller gives (``.schema(...)``)
    CommittedParquetReader.partitions()         one partition per file
    CommittedParquetReader.read(partition)      executor: the file's rows in that schema,
                                                its batch id as column ``batch``

A file read is what a reader of the output sees: a column the file lacks
(written before a nullable column was added) reads as nulls; a column the
schema lacks is dropped. Files come from the warehouse's storage
(``storage_kind`` and ``s3.*`` options, ``onceflow.storage.warehouse_storage_options``)
or, with ``io_properties``, ``catalog`` and ``deployment``, from an Iceberg
table's FileIO; secrets come
from the executor's environment, never from options.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema

from onceflow.sinks import COMMITTED_PARQUET as FORMAT
from onceflow.config.deployment import Deployment
from onceflow.storage import storage_for

BATCH_COLUMN = "batch"


@dataclass(frozen=True)
class FilePartition(InputPartition):
    uri: str
    batch: str


class CommittedParquetReader(DataSourceReader):
    def __init__(self, schema, files: list[list[str]], options: dict[str, str]):
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.files = files
        self.options = options

    def partitions(self) -> list[FilePartition]:
        return [FilePartition(uri, batch) for uri, batch in self.files] or [FilePartition("", "")]

    def _read(self, uri: str) -> pa.Table:
        io = self.options.get("io_properties")
        if io:  # an Iceberg table's data file, through the table's FileIO over its catalog's settings
            from pyiceberg.io import load_file_io

            catalog = Deployment.from_option(self.options["deployment"]).catalog_properties(
                self.options.get("catalog"), f"{FORMAT} of table {self.options.get('table')!r}")
            with load_file_io({**catalog, **json.loads(io)}, uri).new_input(uri).open() as stream:
                return pq.read_table(stream)
        data = storage_for(uri, self.options.get("storage_kind") or None, self.options).read_bytes(uri)
        if data is None:
            raise FileNotFoundError(f"{FORMAT}: {uri} was listed and is gone")
        return pq.read_table(pa.BufferReader(data))

    def read(self, partition: FilePartition) -> Iterator[pa.RecordBatch]:
        if not partition.uri:
            return
        table = self._read(partition.uri)
        columns = []
        for field in self.arrow_schema:
            if field.name == BATCH_COLUMN:
                columns.append(pa.array([partition.batch] * table.num_rows, pa.string()))
            elif field.name in table.column_names:
                columns.append(table.column(field.name).cast(field.type))
            else:
                columns.append(pa.nulls(table.num_rows, field.type))
        yield from pa.Table.from_arrays(columns, schema=self.arrow_schema).to_batches()


class CommittedParquetDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self):
        raise ValueError(f"{FORMAT}: give the output's schema with .schema(...), including a string column "
                         f"{BATCH_COLUMN!r}")

    def reader(self, schema) -> CommittedParquetReader:
        raw = self.options.get("files")
        if raw is None:
            raise ValueError(f"{FORMAT}: option 'files' (JSON [[uri, batch id], ...]) is required")
        return CommittedParquetReader(schema, json.loads(raw), dict(self.options))


def register(spark) -> None:
    spark.dataSource.register(CommittedParquetDataSource)
