"""Airflow hooks: turn Airflow connections into onceflow client settings.

They run on the Airflow worker, inside a task. Connections follow the
conventions of the official providers so that existing connections work:

- Kafka: the apache-kafka provider's format: ``conn_type`` ``kafka``, the
  ``extra`` field a JSON object of librdkafka settings that includes
  ``bootstrap.servers`` (and ``security.protocol``, ``sasl.*`` ...).
- S3: an ``aws`` connection; ``login``/``password`` are the access key and
  secret, ``extra`` may carry ``endpoint_url`` and ``region_name``.
- Spark: a ``spark`` connection, used by the provider's SparkSubmitOperator.
"""
