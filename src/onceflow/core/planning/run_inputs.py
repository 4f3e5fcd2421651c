"""What a DAG run may ask of the planner, read from its run parameters.

A run's conf (the Trigger dialog's JSON, ``airflow dags trigger --conf``, the
REST API) is user input. The planner takes from it only these typed inputs,
validated here, before any ledger write (plan task, Airflow worker):

- ``max_records_per_partition`` (offsets pipelines): a smaller batch this run;
- ``replace_committed`` (interval pipelines): reprocess a committed interval;
- ``faults`` (test deployments only: ``onceflow.core.faults``);
- the transform's own run parameters, declared in the spec
  (``PipelineSpec.run_params``): recorded in the plan's
  ``transform_params``, passed to the transform, never read by the protocol.

Airflow 3 accepts conf keys that the DAG did not declare as ``Param``s; a run
that sends one is refused, naming the key and the keys the pipeline accepts
(docs/protocol.md, "Run parameters"). No run parameter can set a protocol
fact of a plan (``Plan``'s facts are written by the planner only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from onceflow.core import faults
from onceflow.config.settings import ConfigurationError

MAX_RECORDS = "max_records_per_partition"
REPLACE_COMMITTED = "replace_committed"
FAULTS = faults.RUN_PARAM
# onceflow's own run parameters: a transform's may not take these names.
ONCEFLOW_PARAMS = frozenset({MAX_RECORDS, REPLACE_COMMITTED, FAULTS})


class RunParamsRefused(ConfigurationError):
    """A run's parameters are not what the pipeline accepts: nothing was planned."""


@dataclass(frozen=True)
class RunInputs:
    """The planner's inputs from one DAG run, validated."""

    # None: the spec's own cap.
    max_records_per_partition: int | None = None
    replace_committed: bool = False
    transform: Mapping[str, Any] = field(default_factory=dict)


def _refuse(pipeline: str, name: str, why: str) -> RunParamsRefused:
    return RunParamsRefused(f"pipeline {pipeline!r}: run parameter {name!r} {why}. Nothing was planned; trigger the "
                            "run again with a valid value, or without it")


def read_run_inputs(pipeline: str, conf: Mapping[str, Any] | None, params: Mapping[str, Any],
                    declared: Iterable[str], transform_params: Iterable[str]) -> RunInputs:
    """The run's inputs. ``conf``: what the run was triggered with (the user's keys);
    ``params``: the DAG's params as resolved for the run (declared defaults, then
    conf); ``declared``: the names the DAG declares; ``transform_params``: those
    of them that belong to the transform. Raises ``RunParamsRefused``."""
    declared = set(declared)
    if conf is not None and not isinstance(conf, Mapping):
        raise RunParamsRefused(f"pipeline {pipeline!r}: a run's conf must be a JSON object, got {type(conf).__name__}")
    undeclared = sorted(str(k) for k in (conf or {}) if k not in declared)
    if undeclared:
        shown = ", ".join(repr(k[:80]) for k in undeclared[:10]) + (f" and {len(undeclared) - 10} more" if len(undeclared) > 10 else "")
        raise RunParamsRefused(
            f"pipeline {pipeline!r}: this run was triggered with run parameter(s) {shown} that the pipeline does not "
            f"declare. It accepts only: {', '.join(sorted(declared)) or 'none'}. Nothing was planned: a run cannot set "
            "what onceflow records about a batch (its interval, slot, replaced batch...); declare a transform's "
            "parameters in the spec's run_params"
        )
    limit = params.get(MAX_RECORDS)
    if limit is not None and (type(limit) is not int or limit < 1):
        raise _refuse(pipeline, MAX_RECORDS, f"must be an integer >= 1 or null, got {limit!r}")
    replace = params.get(REPLACE_COMMITTED, False)
    if replace is None:
        replace = False
    if type(replace) is not bool:
        raise _refuse(pipeline, REPLACE_COMMITTED, f"must be true or false, got {replace!r}")
    fault_spec = params.get(FAULTS)
    if fault_spec is not None and not isinstance(fault_spec, str):
        raise _refuse(pipeline, FAULTS, f"must be a string or null, got {fault_spec!r}")
    if fault_spec and not faults.run_param_allowed():  # refused here like any other conf: no retry, no batch
        raise _refuse(pipeline, FAULTS, f"must be empty on this deployment, got {fault_spec!r}: its workers do not "
                      f"allow injected faults ({faults.RUN_PARAM_GUARD}={faults.RUN_PARAM_GUARD_VALUE} is set only in "
                      "a test deployment's worker environment)")
    return RunInputs(limit, replace, {name: params.get(name) for name in transform_params})
