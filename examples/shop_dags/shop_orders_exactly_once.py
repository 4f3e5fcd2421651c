"""An Airflow DAG for the second example pipeline, ``shop_orders``: orders and
payments from two Kafka topics become customer-keyed events (murmur2, as Java
producers partition), daily sales in an Iceberg table partitioned by date,
order lines (Parquet) and dead letters, each input record exactly once.

``shop_pipelines`` is the user's own package, beside this file in the DAGs
folder and installed nowhere: the DAG factory ships it to Spark.

Needs ``ONCEFLOW_WAREHOUSE``, the connections ``onceflow_kafka``,
``onceflow_spark``, ``onceflow_iceberg``, ``onceflow_postgres`` (and
``onceflow_s3`` for an S3 warehouse), the package ``onceflow-postgres-sink``
(examples/postgres_sink) where Airflow and Spark run, and the topics ``shop_orders``, ``shop_payments``,
``shop_customer_events`` and ``shop_dead_letter``.
"""

from onceflow.airflow.dag_factory import pipeline_dag
from shop_pipelines.orders import ORDERS

dag = pipeline_dag(ORDERS, dag_id="shop_orders_exactly_once")
