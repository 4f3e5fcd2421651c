"""What the Kafka input and the Kafka sink share (docs/brokers.md): client
settings (``config``), topic administration (``admin``), transactional ids
(``ids``), transaction lifetimes (``lifetime``), the offsets a plan is made
from (``offsets.KafkaOffsetSource``, on the plan task) and the range reader
(``reader``, on Spark executors)."""
