"""What the Kafka input and the Kafka sink share (docs/brokers.md): client
settings (``config``), topic administration (``admin``), the ACLs a pipeline's
principals need (``acls``), transaction lifetimes (``lifetime``), the offsets a plan is made
from (``offsets.KafkaOffsetSource``, on the plan task) and the range reader
(``reader``, on Spark executors)."""
