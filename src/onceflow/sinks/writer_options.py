"""The options of onceflow's sink data sources, checked the same way by each:
names case-insensitive (Spark lowercases them), a missing or non-integer one
named in the error; and the run's faults, which reach a Spark Connect
server's Python workers only as an option."""

from __future__ import annotations

import functools
from typing import Callable, Mapping, TypeVar

from onceflow.core import faults

FAULTS_OPTION = "faults"
_Method = TypeVar("_Method", bound=Callable)


def checked_options(fmt: str, options: Mapping[str, str], required: tuple[str, ...]) -> dict[str, str]:
    """``options`` with lowercase names; a ValueError names every ``required`` one missing."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    missing = [k for k in required if not opts.get(k)]
    if missing:
        raise ValueError(f"{fmt}: missing option(s) {', '.join(missing)}; set them with .option(name, value)")
    return opts


def int_option(fmt: str, opts: Mapping[str, str], key: str) -> int | None:
    """Option ``key`` as an integer (None when absent or empty); a ValueError names it otherwise."""
    if not opts.get(key):
        return None
    try:
        return int(opts[key])
    except ValueError:
        raise ValueError(f"{fmt}: option {key}={opts[key]!r} is not an integer") from None


def job_fault_options() -> dict[str, str]:
    """Driver: the option carrying the run's ``faults`` param to the writers, when the job is
    armed by ``faults.armed_for_job`` (Spark Connect). A spark-submit job's workers inherit
    ``ONCEFLOW_FAULTS`` from the driver's environment instead, so nothing is passed there."""
    spec = faults.job_run_param()
    return {FAULTS_OPTION: spec} if spec else {}


def armed_as_job(method: _Method) -> _Method:
    """A writer method run in a Python worker, armed with the job's ``faults`` option for the call
    (as a spark-submit job's worker is for its life). The server must allow fault injection."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        spec = self.options.faults
        if not spec:
            return method(self, *args, **kwargs)
        with faults.armed_for_job(spec):
            return method(self, *args, **kwargs)

    return call  # type: ignore[return-value]
