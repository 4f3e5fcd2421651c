"""The protocol core (docs/protocol.md): plans and their ranges, batch states
and their transition table, the participant contract as the coordinator sees
it, planning, intervals and interventions, the ledger, and the coordinator,
the state machine that turns votes into a decision and applies it.

It knows no sink kind, no Kafka client, no Spark and no Airflow: those layers
import it, never the other way round (pyproject.toml's layers contract).
"""
