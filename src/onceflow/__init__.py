"""onceflow: exactly-once micro-batch pipelines on Airflow, PySpark and Kafka.

Map of the package (docs/protocol.md has the protocol):

- ``onceflow.spec``        what a pipeline is: inputs, transform, sinks;
- ``onceflow.runtime``     where it runs (``Deployment``) and the objects
                           that run it there;
- ``onceflow.protocol``    plans, participants, batch states, planning;
- ``onceflow.coordinator`` plan -> votes -> decision -> effects, recovery;
- ``onceflow.ledger``      the durable per-pipeline log: atomic
                           create-if-absent records on local disk, Hadoop FS, S3;
- ``onceflow.kafka``, ``onceflow.files``  the sinks' participants and clients;
- ``onceflow.spark``       the Spark data sources, the batch job and its
                           spark-submit application (``spark/submit.py``);
- ``onceflow.hooks``, ``onceflow.operators``, ``onceflow.dag_factory``,
  ``onceflow.provider``    the Airflow provider;
- ``onceflow.cli``, ``onceflow.status``, ``onceflow.discovery``  the command line.

The dev kit (embedded services, local Airflow, chaos, demo) and the example
pipelines are packages of their own; nothing here imports them.
"""

import sys

from ._moved import MovedModuleFinder

__version__ = "0.2.0"

if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(MovedModuleFinder())
