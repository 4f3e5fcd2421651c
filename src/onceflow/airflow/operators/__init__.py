"""Airflow operators for the three protocol tasks of a batch (plan, commit,
rollback). The Spark step is the provider's own SparkSubmitOperator; see
``onceflow.airflow.dag_factory`` for how the four are wired."""
