"""The example pipeline as an interval pipeline (``CLICKSTREAM_HOURLY``): each
hourly run reads the clicks stamped in its hour, so past hours can be
backfilled (``airflow backfill create --dag-id clickstream_hourly ...`` or the
UI's backfill dialog), several at a time, each exactly once.

Its schedule is its own (hourly data intervals are what it reads), so
``ONCEFLOW_SCHEDULE`` does not apply. Needs what clickstream_exactly_once
needs, and the topics ``clicks_hourly_enriched`` and ``clicks_hourly_dead_letter``.
"""

from onceflow.airflow.dag_factory import pipeline_dag
from onceflow_examples.clickstream import CLICKSTREAM_HOURLY

dag = pipeline_dag(CLICKSTREAM_HOURLY, schedule=CLICKSTREAM_HOURLY.schedule, dag_id="clickstream_hourly")
