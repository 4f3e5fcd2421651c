"""Downstream of the clickstream pipeline, scheduled on its committed output.

Runs after each commit of ``clickstream_exactly_once`` (the commit task emits
an Asset event per output only once the batch is committed), so it only
ever sees committed data: it reads the committed Parquet (batches with a
``_SUCCESS`` manifest) and logs the busiest pages.
"""

import os

from airflow.sdk import DAG, task

from onceflow.dag_factory import outputs
from onceflow_examples.clickstream import CLICKSTREAM

WAREHOUSE = os.environ["ONCEFLOW_WAREHOUSE"]  # no default: a DAG must never read another warehouse
PAGE_COUNTS = next(a for a in outputs(CLICKSTREAM, WAREHOUSE) if a.name.endswith(".page_minute_counts"))

with DAG(dag_id="clickstream_page_report", schedule=[PAGE_COUNTS], catchup=False, tags=["onceflow", "downstream"]):

    @task
    def top_pages(triggering_asset_events=None) -> dict:
        from collections import Counter

        from onceflow.files.reader import read_committed

        storage = None
        if WAREHOUSE.startswith("s3://"):  # the pipeline's own S3 connection, never a default one
            from onceflow.storage.s3 import S3Storage
            from onceflow.hooks.s3 import S3ConnectionHook

            storage = S3Storage(S3ConnectionHook().connection("the page report"))
        table = read_committed(PAGE_COUNTS.uri, storage)
        views = Counter()
        for row in table.select(["page", "views"]).to_pylist() if table.num_rows else []:
            views[row["page"]] += row["views"]
        print(f"committed views per page: {dict(views.most_common())}")
        return dict(views)

    top_pages()
