"""A real Airflow 3 on this machine, started and driven from Python.

Used by ``onceflow demo`` and the end-to-end tests: DAGs run through Airflow
itself (``airflow dags test``, or api-server + scheduler + dag-processor
driven over the REST API), never by calling task functions directly.

Call sequence (all in the calling process, e.g. a test or the CLI)::

    airflow = LocalAirflow(home, dags_folder, plugins_folder, extra_env={...})
    airflow.set_connection("spark_local", {"conn_type": "spark", "host": "local[2]"})
    airflow.migrate()                                  # idempotent
    result = airflow.dags_test("my_dag", conf={...})   # one in-process run
    assert result.succeeded, result.describe()         # exit code, run and task states
    with airflow:                                      # start() ... stop()
        with airflow.api() as api:
            api.wait_for_dag("my_dag"); api.unpause("my_dag")
            run_id = api.trigger("my_dag", conf={...})
            state = api.wait_for_run("my_dag", run_id)  # "success" | "failed"
            api.explain("my_dag", run_id)               # states + failed tasks' log tails
            api.clear_run("my_dag", run_id, only_failed=True)

A run's state comes from its leaf tasks: keep commit and rollback both
leaves (docs/protocol.md, "One batch"), or a successful rollback makes a failed batch
look like a successful run.
"""

from onceflow_devkit.local_airflow.errors import AirflowHarnessError
from onceflow_devkit.local_airflow.metadata import RunStates
from onceflow_devkit.local_airflow.rest import AirflowApi
from onceflow_devkit.local_airflow.processes import stray_processes
from onceflow_devkit.local_airflow.runtime import COMPONENTS, DagsTestResult, LocalAirflow

__all__ = [
    "AirflowApi",
    "AirflowHarnessError",
    "COMPONENTS",
    "DagsTestResult",
    "LocalAirflow",
    "RunStates",
    "stray_processes",
]
