"""The one error type of the harness."""


class AirflowHarnessError(RuntimeError):
    """Airflow could not be started, did not answer, or a run did not finish.

    Messages name the DAG/run or component, the log file to read, and the
    tail of what Airflow said.
    """
