"""An Airflow DAG (built by onceflow's DAG factory) for the example pipeline: click events from Kafka topic ``clicks`` become
per-page minute counts (Parquet), enriched events (``clicks_enriched``) and
dead letters (``clicks_dead_letter``), each input record exactly once.

Needs ``ONCEFLOW_WAREHOUSE`` and the connections ``onceflow_kafka``,
``onceflow_spark`` (and ``onceflow_s3`` for an S3 warehouse); ``onceflow
demo`` sets them all for the embedded stack.
"""

from onceflow.dag_factory import pipeline_dag
from onceflow_examples.clickstream import CLICKSTREAM

dag = pipeline_dag(CLICKSTREAM, dag_id="clickstream_exactly_once")
