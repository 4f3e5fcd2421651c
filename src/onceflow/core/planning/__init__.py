"""Planning: what the next batch of a pipeline reads, decided once (I1, I6, I8).

Runs in the Airflow plan task. Two planners, one per kind of pipeline:

- ``offsets``: the next offsets after the previous batch (``batches="offsets"``),
  through ``Coordinator.plan_next``;
- ``interval_planner``: the records of a DAG run's data interval
  (``batches="interval"``), over the rules of ``intervals``.

Both follow ``reruns`` (a retry of the same run, a replay's transform
parameters), read the log through ``source.OffsetSource``, take a pipeline's
``config.PlanConfig`` and a run's ``run_inputs``, and follow an operator's
``interventions``. What they write, the ``Plan``, is the protocol's record
(``onceflow.core.plan``): the ledger, the Spark jobs and the outputs read it.
"""

from onceflow.compat.moved_modules import split_name


def __getattr__(name: str):  # 0.3's names of this module, before it was a package
    return split_name(__name__, name)
