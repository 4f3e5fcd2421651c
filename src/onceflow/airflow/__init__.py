"""onceflow as an Airflow provider: the DAG factory, the operators of the
protocol's tasks, the hooks that turn connections into client settings, the
input-lag trigger, Asset events, metrics and the UI page (a plugin).

``onceflow.provider`` is the entry point that tells Airflow what is here.
"""
