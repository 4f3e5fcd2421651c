"""How long a pre-committed Kafka transaction stays committable.

The broker aborts a transaction ``transaction.timeout.ms`` after it began. The
commit refuses a vote whose transaction is older than this fraction of that
timeout, so it never ends a transaction the broker may be aborting under it.
The spark task's execution_timeout is the same bound, read at DAG parsing:
this module imports nothing.
"""

DEFAULT_SAFETY_FRACTION = 0.5
# The producers' transaction.timeout.ms unless a sink says otherwise: Apache Kafka's default
# transaction.max.timeout.ms, the longest a broker allows unless raised. One default for the spec,
# the writer and the commit, so the commit never judges a vote by another timeout than it was written with.
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
