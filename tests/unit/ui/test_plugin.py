"""The plugin as Airflow loads it: from the installed package's entry point."""

from __future__ import annotations

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
    assert views["dag_run"]["href"] == "/onceflow/dags/{DAG_ID}/runs/{RUN_ID}"


def test_every_route_of_the_app_checks_airflow_auth():
    from onceflow.ui.app import app

    routes = [r for r in app.routes if hasattr(r, "dependant")]
    assert len(routes) == 7
    for route in routes:
        calls = {d.call.__qualname__ for d in route.dependant.dependencies}
        assert calls & {"requires_access_dag.<locals>.inner", "get_user"}, route.path
