"""The Airflow 3 plugin: onceflow's app in the api-server, a page in the
navigation, and a tab on every DAG run (registered through the
``airflow.plugins`` entry point: nothing to copy into a plugins folder)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/onceflow"


def _app():
    from onceflow.airflow.ui.app import app

    return app


class OnceflowPlugin(AirflowPlugin):
    name = "onceflow"
    fastapi_apps = [{"app": _app(), "url_prefix": URL_PREFIX, "name": "onceflow"}]
    external_views = [
        # The UI shows each in an iframe at /plugin/<url_route> (same origin: the
        # session cookie reaches the app, which checks it on every request).
        {"name": "onceflow", "href": f"{URL_PREFIX}/", "destination": "nav", "url_route": "onceflow"},
        {"name": "onceflow batch", "href": f"{URL_PREFIX}/dags/{{DAG_ID}}/runs/{{RUN_ID}}", "destination": "dag_run",
         "url_route": "onceflow-batch"},
        # the same view from any task instance of the run (plan, if the DAG has one, spark, commit, rollback)
        {"name": "onceflow batch", "href": f"{URL_PREFIX}/dags/{{DAG_ID}}/runs/{{RUN_ID}}", "destination": "task_instance",
         "url_route": "onceflow-batch-of-task"},
    ]
