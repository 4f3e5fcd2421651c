"""Broker behaviours the Kafka side relies on that services/kafka_broker.py does not name yet.

Proposed for ``CAPABILITIES`` there (measured on noida-db 0.2.3; Apache
Kafka has all of them). Until they are added, tests that require them are
skipped on every broker, which says so in their reason.
"""

# A read_committed fetch that starts after the abort marker of producer P
# still returns P's later committed records. noida-db includes that ended
# aborted transaction in the fetch response, so the client drops every later
# record of P (the same transactional.id after a fence or a rollback).
FETCH_AFTER_ABORT_SEES_LATER_COMMITS = "read_committed from mid-log still sees a producer's commits after its abort"

# EndTxn with a wrong producer id is refused or ignored and leaves the open
# transaction committable. noida-db answers NONE and wedges it: neither the
# right handle nor a fence ends it, and the partition's last stable offset
# stays behind it.
WRONG_PID_END_TXN_IS_HARMLESS = "EndTxn with a wrong producer id leaves the transaction intact"

# One transaction of a few hundred thousand records per partition commits
# and stays readable. noida-db stops serving fetches for such a partition.
LARGE_TRANSACTIONS = "transactions of 250,000+ records per partition commit and stay readable"
