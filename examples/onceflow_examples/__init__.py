"""Example pipelines, written as a user would: only onceflow's public API.

``clickstream``: click events -> per-page minute counts (Parquet), enriched
events and dead letters (Kafka). ``clickstream_data`` makes its input.
"""
