"""The onceflow page in the Airflow UI: an Airflow 3 plugin (``plugin``) whose
FastAPI app (``app``) serves a JSON API and HTML pages built from the ledger
and Kafka (``overview``). Read-only: no service or database of its own."""
