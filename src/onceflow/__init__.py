"""onceflow: exactly-once micro-batch pipelines on Airflow, PySpark and Kafka.

The package by layer, lowest first; a layer imports only those below it
(pyproject.toml's layers contract; docs/protocol.md has the protocol):

- ``onceflow.config``    what a deployment says: settings, names, connections,
                         ``Deployment``, where onceflow keeps its records;
- ``onceflow.storage``   one storage layer (local disk, Hadoop FS, S3);
- ``onceflow.core``      the protocol: plans, states, participants, planning,
                         the ledger and the coordinator;
- ``onceflow.kafka``     what the Kafka input and sink share: client settings,
                         admin, offsets, the range reader;
- ``onceflow.sources``   the Kafka input: its Spark data source, its offsets;
- ``onceflow.sinks``     the sink contract (``sinks.api``), the registry, and one
                         folder per built-in kind (files, Kafka, Iceberg);
- ``onceflow.pipeline``  a pipeline's spec, discovery and runtime;
- ``onceflow.spark``     the batch job, Spark Connect and spark-submit;
- ``onceflow.airflow``   the Airflow provider (DAG factory, operators, hooks,
                         trigger, assets, metrics, UI page), whose entry point is
                         ``onceflow.provider``;
- ``onceflow.ops``       the ``onceflow`` command and the audit;
- ``onceflow.testing``   the conformance kit for sink authors.

The dev kit (embedded services, local Airflow, chaos, demo) and the example
pipelines are packages of their own; nothing here imports them.
"""

import sys

from onceflow.compat.moved_modules import MovedModuleFinder, RenamedModuleFinder

__version__ = "0.3.0"

if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, RenamedModuleFinder())
    sys.meta_path.append(MovedModuleFinder())
