"""onceflow's dev kit: what the demo and the tests need, and production does not.

- ``services``       the embedded stack: Kafka-protocol brokers and an S3
                     endpoint from PyPI wheels, a Spark standalone cluster;
- ``local_airflow``  a hermetic local Airflow (dags test, or api-server,
                     scheduler and dag-processor);
- ``chaos``          faulted batches through Airflow and their figures;
- ``audit``          the clickstream example's independent oracle;
- ``demo``           ``onceflow demo``; ``commands`` adds the dev kit's CLI
                     commands to ``onceflow``.

It imports the library; the library never imports it (a contract in
pyproject.toml, checked by the test suite).
"""
