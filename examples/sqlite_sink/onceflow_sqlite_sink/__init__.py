"""The smallest complete onceflow sink kind: a table in an SQLite database file.

Each Spark task attempt stages its split's rows in ``<table>_staged`` under an
id of its own; the commit moves the voted ids' rows into the table, each split
in one transaction with its marker row in ``onceflow_committed``; the rollback
and ``after_commit`` delete every staged row of the batch. Installed, it is
kind ``sqlite``::

    SinkSpec("counts", "sqlite", "counts", splits=2, options={"database": "/data/counts.db"})

docs/writing-a-sink.md of the onceflow repository walks through it.
"""

from .kind import SQLITE  # noqa: F401
