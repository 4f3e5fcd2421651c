"""Iceberg tables as an output: one table snapshot per batch.

- ``properties``: which catalog properties are secret (no pyiceberg import);
- ``tables``: the catalog, the table of a sink (created on first use) and its partition spec;
- ``data_files``: a data file's metadata as the JSON of a vote;
- ``sink``: the participant that commits a batch as one snapshot, replaces, aborts.
"""
