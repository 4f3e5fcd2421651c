"""Chaos runs: the example pipeline through Airflow while faults are injected.

``onceflow chaos --batches N --seed S`` (cli.py) drives ``runner.run_chaos``:

    schedule.fault_sequence(seed, ...)   one Fault per batch, reproducible from the seed
    per batch: trigger a DAG run (REST) -> injectors.inject(fault) in a thread
               -> wait for the run -> record what really happened
    drain:     fault-free runs until every input record is committed
    audit:     every real output against the input (audit.clickstream_audit)
    figures:   figures.ChaosFigures, printed and as JSON

Runs in the caller's process; Airflow, Spark and the brokers are the real
processes of an embedded stack of the run's own (``<ONCEFLOW_HOME>/chaos``).
"""
