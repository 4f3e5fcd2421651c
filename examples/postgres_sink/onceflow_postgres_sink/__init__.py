"""A PostgreSQL table sink for onceflow, written against the public sink contract alone.

Each split of a batch attempt writes its rows, and a marker row, in one
transaction that it ends with ``PREPARE TRANSACTION``; the commit task runs
``COMMIT PREPARED`` for the voted attempt, the rollback task ``ROLLBACK
PREPARED`` for every attempt. Installed, it is kind ``postgres``::

    SinkSpec("orders", "postgres", "public.orders", splits=2, options={"connection": "pg_orders"})

``connection`` is an Airflow connection (type ``postgres``); the Spark
executors read it from ``AIRFLOW_CONN_<ID>`` and the password from
``PGPASSWORD`` (connection.py says why), as Airflow itself reads connections
from the environment. docs/writing-a-sink.md of the onceflow repository walks through it.
"""

from .kind import POSTGRES  # noqa: F401
