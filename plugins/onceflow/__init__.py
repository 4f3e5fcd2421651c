"""onceflow: exactly-once micro-batch pipelines on Airflow, PySpark and Kafka.

Map of the package (DESIGN.md has the protocol):

- ``onceflow.services``  the embedded stack (Kafka broker, S3 endpoint) for
  development, demos and tests.
- ``onceflow.ledger``    the durable per-pipeline log: atomic
  create-if-absent records on local disk, Hadoop FS and S3.
- ``onceflow.protocol``  the batch state machine, planning, the coordinator
  that drives plan -> votes -> decision -> effects, and fault points.
- ``onceflow.kafka``     planned range reads, transactional pre-commit and
  commit/abort of a transaction from another process.
"""

__version__ = "0.1.0"
