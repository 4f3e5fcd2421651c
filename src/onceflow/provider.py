"""What Airflow learns about onceflow from the ``apache_airflow_provider``
entry point: the hooks, operators, trigger, UI plugin and connection types it ships.

The connection types (``connection-types`` below, the one list of them: README.md and
docs/pipelines.md are made from it) are onceflow's own, so that the apache-kafka and Amazon
providers keep theirs; the Kafka and S3 hooks also read connections of those providers' ``kafka``
and ``aws`` types, which share the format.
"""

from __future__ import annotations

from onceflow import __version__


def get_provider_info() -> dict:
    return {
        "package-name": "onceflow",
        "name": "onceflow",
        "description": "Exactly-once micro-batch pipelines from Kafka through Spark to files, Iceberg tables, "
        "Kafka and the sink kinds of other packages, with a two-phase commit driven by Airflow tasks.",
        "versions": [__version__],
        "integrations": [{"integration-name": "onceflow", "tags": ["service"]}],
        "hooks": [{"integration-name": "onceflow", "python-modules": ["onceflow.airflow.hooks.kafka", "onceflow.airflow.hooks.s3",
                                                                   "onceflow.airflow.hooks.iceberg"]}],
        "operators": [{"integration-name": "onceflow", "python-modules": ["onceflow.airflow.operators.batch",
                                                                       "onceflow.airflow.operators.spark"]}],
        "triggers": [{"integration-name": "onceflow", "python-modules": ["onceflow.airflow.triggers.input_lag"]}],
        "plugins": [{"name": "onceflow", "plugin-class": "onceflow.airflow.ui.plugin.OnceflowPlugin"}],
        "connection-types": [
            {"connection-type": "onceflow_kafka", "hook-class-name": "onceflow.airflow.hooks.kafka.KafkaConfigHook",
             "hook-name": "onceflow Kafka"},
            {"connection-type": "onceflow_s3", "hook-class-name": "onceflow.airflow.hooks.s3.S3ConnectionHook",
             "hook-name": "onceflow S3"},
            {"connection-type": "onceflow_iceberg", "hook-class-name": "onceflow.airflow.hooks.iceberg.IcebergCatalogHook",
             "hook-name": "onceflow Iceberg catalog"},
        ],
    }
