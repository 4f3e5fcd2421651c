"""The Iceberg sink kind: one table snapshot per batch.

- ``kind``: the kind (``SinkKind``), what the registry loads (no pyiceberg import);
- ``data_source``: the Spark data source that writes a batch's data files (pre-commit, executors);
- ``tables``: the catalog, the table of a sink (created on first use) and its partition spec;
- ``data_files``: a data file's metadata as the JSON of a vote;
- ``participant``: commits a batch as one snapshot, replaces, aborts (commit task).

Which catalog properties are secret is ``onceflow.config.iceberg_catalogs``.
"""
