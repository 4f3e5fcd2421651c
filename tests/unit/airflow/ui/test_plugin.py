"""The plugin as Airflow loads it: from the installed package's entry point."""

from __future__ import annotations

import dataclasses
from importlib.metadata import entry_points


def test_airflow_finds_the_plugin_class_through_its_entry_point():
    from airflow.plugins_manager import AirflowPlugin

    (entry,) = [ep for ep in entry_points(group="airflow.plugins") if ep.name == "onceflow"]
    plugin = entry.load()
    assert isinstance(plugin, type) and issubclass(plugin, AirflowPlugin) and plugin.name == "onceflow"
    (app,) = plugin.fastapi_apps
    assert app["url_prefix"] == "/onceflow"
    views = {v["destination"]: v for v in plugin.external_views}
    assert views["nav"]["href"] == "/onceflow/" and views["nav"]["url_route"] == "onceflow"
    assert views["dag_run"]["href"] == views["task_instance"]["href"] == "/onceflow/dags/{DAG_ID}/runs/{RUN_ID}"
    assert len({v["url_route"] for v in plugin.external_views}) == 3  # Airflow drops a view whose route repeats


def test_every_route_of_the_app_checks_airflow_auth():
    from onceflow.airflow.ui.app import app

    assert app.openapi_url is None and app.docs_url is None  # no unauthenticated schema or docs page
    import inspect

    routes = [r for r in app.routes if hasattr(r, "dependant")]
    assert len(routes) == 9
    for route in routes:
        calls = {d.call.__qualname__ for d in route.dependant.dependencies}
        assert calls & {"requires_access_dag.<locals>.inner", "get_user"}, route.path
        # what a route may do to the DAG's runs: read them, or (split, skip) what running the DAG needs
        methods = {inspect.getclosurevars(d.call).nonlocals["method"] for d in route.dependant.dependencies
                   if d.call.__qualname__ == "requires_access_dag.<locals>.inner"}
        assert methods == ({"PUT"} if route.methods == {"POST"} else {"GET"} if methods else set()), route.path


def test_the_plugin_reads_a_pipeline_from_its_serialized_commit_task_not_from_dag_code():
    """pipeline_dag writes the deployment (no secrets) as the commit task's doc_json, which Airflow serializes."""
    from onceflow.airflow.deployed import COMMIT_TASK_ID, DeployedPipeline
    from tests.doubles.specs import ORDERS

    from onceflow.airflow.dag_factory import pipeline_dag

    dag = pipeline_dag(ORDERS, warehouse="s3://lake/w", kafka_conn_id="k", aws_conn_id="a", dag_id="clicks_prod")
    doc = dag.get_task(COMMIT_TASK_ID).doc_json
    found = DeployedPipeline.from_doc("clicks_prod", doc)
    assert found == DeployedPipeline("clicks_prod", dataclasses.replace(ORDERS, params={}), "s3://lake/w", "k", "a")
    assert DeployedPipeline.from_doc("x", None) is None and DeployedPipeline.from_doc("x", '{"other": 1}') is None
    assert DeployedPipeline.from_doc("x", "not json") is None
