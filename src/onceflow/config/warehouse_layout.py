"""Where onceflow keeps its own records in a warehouse, spelled once.

    <warehouse>/_onceflow/<pipeline>/             the ledger (onceflow.core.ledger)
    <warehouse>/_onceflow/<pipeline>/kafka-staging/<sink>/<batch id>/
                                                  staged copies of Kafka output, for repair
    <warehouse>/_onceflow/<pipeline>/withheld/<sink>/<batch id>/
                                                  records of committed batches that Kafka
                                                  refuses (too large), with the reason
    <warehouse>/_onceflow/<pipeline>/quarantine/<batch id>/
                                                  the input records of a batch an operator skipped

Readers of the warehouse skip names that start with ``_``. A file sink's
own layout (staging, ``batch=<id>/``, manifests) is ``onceflow.sinks.files.layout``.
"""

from __future__ import annotations

ONCEFLOW_DIR = "_onceflow"


def pipeline_dir(pipeline: str) -> str:
    """The pipeline's directory, relative to the warehouse (the ledger's root key)."""
    return f"{ONCEFLOW_DIR}/{pipeline}"


def kafka_staging_dir(warehouse: str, pipeline: str, sink: str, batch_id: str) -> str:
    return f"{warehouse.rstrip('/')}/{pipeline_dir(pipeline)}/kafka-staging/{sink}/{batch_id}"


def withheld_dir(warehouse: str, pipeline: str, sink: str, batch_id: str) -> str:
    return f"{warehouse.rstrip('/')}/{pipeline_dir(pipeline)}/withheld/{sink}/{batch_id}"


def quarantine_dir(warehouse: str, pipeline: str, batch_id: str) -> str:
    return f"{warehouse.rstrip('/')}/{pipeline_dir(pipeline)}/quarantine/{batch_id}"
