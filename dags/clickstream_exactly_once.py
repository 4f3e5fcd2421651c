"""An Airflow DAG (built by onceflow's DAG factory) for the example pipeline: click events from Kafka topic ``clicks`` become
per-page minute counts (Parquet), enriched events (``clicks_enriched``) and
dead letters (``clicks_dead_letter``), each input record exactly once.

Needs ``ONCEFLOW_WAREHOUSE`` and the connections ``onceflow_kafka``,
``onceflow_spark`` (and ``onceflow_s3`` for an S3 warehouse); ``onceflow
demo`` sets them all for the embedded stack.
"""

import json
import os
from dataclasses import replace

from onceflow.airflow.dag_factory import pipeline_dag
from onceflow_examples import clickstream

# The chaos run shortens the Kafka outputs' transaction timeout, so that a commit held past the
# votes' age guard (half of it) takes minutes, not the default's 7.5.
TIMEOUT_MS = os.environ.get("CLICKSTREAM_TRANSACTION_TIMEOUT_MS")
SPEC = clickstream.CLICKSTREAM if not TIMEOUT_MS else replace(clickstream.CLICKSTREAM, sinks=tuple(
    replace(s, transaction_timeout_ms=int(TIMEOUT_MS)) if s.kind == "kafka" else s for s in clickstream.CLICKSTREAM.sinks))
# The chaos run's --postgres adds a PostgreSQL table output (the onceflow-postgres-sink package's kind)
# through this Airflow connection.
TABLE_CONNECTION = os.environ.get("CLICKSTREAM_TABLE_CONNECTION")
if TABLE_CONNECTION:
    SPEC = clickstream.with_table(SPEC, TABLE_CONNECTION)

# The chaos run's --records-per-split writes its small batches' outputs in fewer splits.
RECORDS_PER_SPLIT = os.environ.get("CLICKSTREAM_RECORDS_PER_SPLIT")
if RECORDS_PER_SPLIT:
    SPEC = replace(SPEC, records_per_split=int(RECORDS_PER_SPLIT))

# The transform's free-form params (PipelineSpec.params), a JSON object: the end-to-end test gives it a
# secret-shaped one that must show in no command line, task log, rendered field or XCom.
PARAMS = os.environ.get("CLICKSTREAM_PARAMS")
if PARAMS:
    SPEC = replace(SPEC, params=json.loads(PARAMS))

# The chaos run's --plan-in-spark-task (and a test) build the DAG without a plan task.
PLAN_IN_SPARK_TASK = os.environ.get("CLICKSTREAM_PLAN_IN_SPARK_TASK") == "1"

dag = pipeline_dag(SPEC, dag_id="clickstream_exactly_once", plan_in_spark_task=PLAN_IN_SPARK_TASK)
