"""The Kafka input: the Spark data source that reads a plan's exact offset
ranges (read_committed), and the participant that mirrors committed ends
into the consumer group."""
