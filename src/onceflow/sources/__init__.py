"""Inputs: what a batch reads and what its commit moves (only Kafka today)."""
