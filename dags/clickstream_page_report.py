"""Downstream of the clickstream pipeline, scheduled on its committed output.

Runs after each commit of ``clickstream_exactly_once`` (its tasks emit an
Asset event per output only for a committed batch, saying which batch, its
input ranges and its records per output), so it only ever sees committed
data: it logs which batches triggered it, reads the committed Parquet
(batches with a ``_SUCCESS`` manifest) and logs the busiest pages.
"""

import os

from airflow.sdk import DAG, task

from onceflow.airflow.dag_factory import outputs
from onceflow_examples.clickstream import CLICKSTREAM

WAREHOUSE = os.environ["ONCEFLOW_WAREHOUSE"]  # no default: a DAG must never read another warehouse
PAGE_COUNTS = next(a for a in outputs(CLICKSTREAM, WAREHOUSE) if a.name.endswith(".page_minute_counts"))

with DAG(dag_id="clickstream_page_report", schedule=[PAGE_COUNTS], catchup=False, tags=["onceflow", "downstream"]):

    @task
    def top_pages(triggering_asset_events=None) -> dict:
        from collections import Counter

        from onceflow.sinks.files.reader import read_committed

        batches = sorted({event.extra["batch_id"] for events in (triggering_asset_events or {}).values()
                          for event in events if "batch_id" in (event.extra or {})})
        print(f"triggered by committed batch(es) {batches}")

        storage = None
        if WAREHOUSE.startswith("s3://"):  # the pipeline's own S3 connection, never a default one
            from onceflow.storage.s3 import S3Storage
            from onceflow.airflow.hooks.s3 import S3ConnectionHook

            storage = S3Storage(S3ConnectionHook().connection("the page report"))
        table = read_committed(PAGE_COUNTS.uri, storage)
        views = Counter()
        for row in table.select(["page", "views"]).to_pylist() if table.num_rows else []:
            views[row["page"]] += row["views"]
        print(f"committed views per page: {dict(views.most_common())}")
        return {"batches": batches, "views": dict(views)}

    top_pages()
