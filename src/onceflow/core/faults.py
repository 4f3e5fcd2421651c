"""Named fault points: where a test (or a chaos run) makes onceflow fail.

Code that can be interrupted calls ``fault_point("name")`` at that step
(before and after every ledger write, between the effects of a commit). A
point does nothing unless it is armed, either in-process::

    faults.arm("ledger.decision.after_write", "crash")          # first hit
    faults.arm("commit.between_effects", "raise", hits=2)       # second hit

or for a whole process (an Airflow task, a Spark driver) through the
environment::

    ONCEFLOW_FAULTS="ledger.decision.after_write=crash,commit.between_effects=raise@2"

or for one Airflow DAG run, through its ``faults`` run param (same syntax;
honoured only on workers that set ``ONCEFLOW_FAULT_INJECTION=enabled``).

``crash`` ends the process at once with ``os._exit(137)`` (what a SIGKILL or
an OOM kill looks like to the rest of the system: no ``finally``, no
``atexit``); ``raise`` raises ``InjectedFault``; ``hold`` stops there for
``HOLD_S`` seconds, then goes on (a step too short to catch otherwise, held
while a test kills or freezes the machine it runs on). An armed point fires once,
on its ``hits``-th hit counted from arming, then disarms. The name ``*``
(``ANY``) matches every point: ``arm("*", "crash", hits=7)`` fails at the
seventh step reached, whichever it is, which spreads chaos runs evenly over
the steps an operation really takes.

Every point is declared with ``declare()`` at import time by the module that
uses it, and that module is listed in its package's ``onceflow.fault_points``
entry point group (a sink kind's package lists its own), so ``ALL_POINTS``
lists them for chaos tooling that picks at random, and a misspelt name fails
fast instead of silently never firing. A kind's points start with its name.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Iterator

from onceflow.config.settings import ConfigurationError

ENV_VAR = "ONCEFLOW_FAULTS"
# Airflow run param ``faults`` (same syntax) arms one DAG run's tasks and
# Spark job; honoured only where the workers opt in with this variable, so a
# production deployment cannot be crashed by a run's conf.
RUN_PARAM = "faults"
RUN_PARAM_GUARD = "ONCEFLOW_FAULT_INJECTION"
RUN_PARAM_GUARD_VALUE = "enabled"
# When set, every fault that fires appends one line to this file first
# (chaos runs count what was really injected, not what was asked for).
FIRED_LOG_VAR = "ONCEFLOW_FAULTS_FIRED_LOG"
CRASH_EXIT_CODE = 137
ACTIONS = ("crash", "raise", "hold")
HOLD_S = 60.0
ANY = "*"

# name -> one-line description; filled by declare() at import time.
ALL_POINTS: dict[str, str] = {}
# name -> the module that declared it: a point is listed when an entry point names its module.
DECLARED_IN: dict[str, str] = {}
# Every module that declares points, as its package lists it in this entry point group (onceflow's
# own and a sink kind's). ONCEFLOW_FAULTS reaches processes that import different parts of onceflow
# (an Airflow task, the Spark driver, a Spark Python worker), so names are checked against all of
# them, not only against what this process happens to have imported.
ENTRY_POINT_GROUP = "onceflow.fault_points"


def declare_all() -> dict[str, str]:
    """Import every declaring module of the installed packages; returns ALL_POINTS (for chaos tooling)."""
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        importlib.import_module(entry.value)
    return ALL_POINTS


def listed_points() -> set[str]:
    """The declared points whose module an installed package lists in ``ENTRY_POINT_GROUP``: the
    ones any process can arm by name, one that never imported their module included."""
    declare_all()
    modules = {entry.value for entry in entry_points(group=ENTRY_POINT_GROUP)}
    return {name for name, module in DECLARED_IN.items() if module in modules}


def _listed() -> bool:
    """Some installed package lists its declaring modules. Code shipped without its package's metadata
    (onceflow as a zip on a Spark executor) finds none: there the names were checked where the run was
    armed (the Airflow task, the driver), and are taken as they come."""
    return bool(entry_points(group=ENTRY_POINT_GROUP))


class InjectedFault(RuntimeError):
    """Raised by an armed ``raise`` fault point. Never raised in production."""

    def __init__(self, point: str):
        super().__init__(f"injected fault at {point!r} ({ENV_VAR} or faults.arm)")
        self.point = point


@dataclass
class _Armed:
    action: str
    hits: int
    seen: int = 0


_lock = threading.Lock()
_armed: dict[str, _Armed] = {}
_env_loaded = False
_job_run_param: str | None = None
_recorders: list[set[str]] = []


def declare(name: str, description: str) -> str:
    """Register a fault point (at import time); returns ``name`` for use as a constant."""
    ALL_POINTS[name] = description
    DECLARED_IN[name] = sys._getframe(1).f_globals.get("__name__", "")  # the caller: the declaring module
    return name


def _check(name: str, action: str, hits: int, source: str) -> None:
    if name != ANY and name not in ALL_POINTS:
        declare_all()
    if name != ANY and name not in ALL_POINTS and _listed():
        known = ", ".join(sorted(ALL_POINTS)) or "(none declared yet)"
        raise ConfigurationError(f"{source}: unknown fault point {name!r}; known points: {known}")
    if action not in ACTIONS:
        raise ConfigurationError(f"{source}: fault action {action!r} for {name!r} must be one of {', '.join(ACTIONS)}")
    if hits < 1:
        raise ConfigurationError(f"{source}: hit number for {name!r} must be >= 1, got {hits}")


def arm(name: str, action: str, hits: int = 1) -> None:
    """Make point ``name`` fire (``ACTIONS``) on its ``hits``-th hit from now."""
    _load_env()
    _check(name, action, hits, "faults.arm")
    with _lock:
        _armed[name] = _Armed(action, hits)


def disarm(name: str | None = None) -> None:
    """Disarm one point, or every point (``name=None``)."""
    with _lock:
        if name is None:
            _armed.clear()
        else:
            _armed.pop(name, None)


def armed() -> dict[str, str]:
    """Points still armed, as ``{name: "action@hits"}`` (for test diagnostics)."""
    with _lock:
        return {n: f"{a.action}@{a.hits}" for n, a in _armed.items()}


def parse(spec: str) -> dict[str, tuple[str, int]]:
    """Parse an ``ONCEFLOW_FAULTS`` value: ``name=action[@hits],...``."""
    result: dict[str, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, rest = item.partition("=")
        if not sep:
            raise ConfigurationError(
                f"{ENV_VAR}: {item!r} is not name=action[@hits], e.g. ledger.decision.after_write=crash"
            )
        action, _, hits_text = rest.partition("@")
        try:
            hits = int(hits_text) if hits_text else 1
        except ValueError:
            raise ConfigurationError(f"{ENV_VAR}: hit number in {item!r} is not an integer") from None
        _check(name.strip(), action.strip(), hits, ENV_VAR)
        result[name.strip()] = (action.strip(), hits)
    return result


def run_param_allowed() -> bool:
    return os.environ.get(RUN_PARAM_GUARD) == RUN_PARAM_GUARD_VALUE


def _require_run_param_allowed(spec: str) -> None:
    if not run_param_allowed():
        raise ConfigurationError(
            f"this DAG run asks for injected faults (run param {RUN_PARAM!r}={spec!r}) but fault injection is "
            f"disabled on this worker: set {RUN_PARAM_GUARD}={RUN_PARAM_GUARD_VALUE} in the Airflow workers' "
            "environment of a test deployment, or trigger the run without that param"
        )


def arm_run_param(spec: str | None) -> None:
    """Airflow worker: arm the DAG run's ``faults`` param (``ONCEFLOW_FAULTS`` syntax).

    Refused, naming the setting, unless the worker's environment sets
    ``ONCEFLOW_FAULT_INJECTION=enabled``."""
    if not spec:
        return
    _require_run_param_allowed(spec)
    _load_env()
    for name, (action, hits) in parse(spec).items():
        with _lock:
            _armed[name] = _Armed(action, hits)


@contextmanager
def armed_for_job(run_param: str | None) -> Iterator[None]:
    """Inside the block, this process is armed as a fresh Spark driver would be:
    ``ONCEFLOW_FAULTS`` and the run's ``faults`` param, nothing else; after it, as before.
    A Spark Connect job's driver is the spark task's own process, which may run other
    tasks or tries before and after it (``airflow dags test``)."""
    global _job_run_param
    if run_param:
        _require_run_param_allowed(run_param)
    _load_env()
    parsed = parse(",".join(filter(None, [os.environ.get(ENV_VAR, ""), run_param or ""])))
    with _lock:
        armed_before, run_param_before = dict(_armed), _job_run_param
        _armed.clear()
        _armed.update({name: _Armed(action, hits) for name, (action, hits) in parsed.items()})
        _job_run_param = run_param or None
    try:
        yield
    finally:
        with _lock:
            _armed.clear()
            _armed.update(armed_before)
            _job_run_param = run_param_before


@contextmanager
def recording() -> Iterator[set[str]]:
    """Inside the block, the set it gives collects the name of every point reached in this process,
    armed or not (the conformance kit's check that its tests reach each point of a kind)."""
    reached: set[str] = set()
    with _lock:
        _recorders.append(reached)
    try:
        yield reached
    finally:
        with _lock:
            _recorders[:] = [r for r in _recorders if r is not reached]  # by identity: sets compare by value


def job_run_param() -> str | None:
    """The run's ``faults`` param inside ``armed_for_job`` (None elsewhere): a Spark Connect
    job passes it on to the server's Python workers, which its environment cannot reach."""
    return _job_run_param


def _load_env() -> None:
    # Lazily, on the first hit: by then every module that declares points
    # the process uses has been imported, so names can be checked.
    global _env_loaded
    if _env_loaded:
        return
    with _lock:
        if _env_loaded:
            return
        _env_loaded = True
        spec = os.environ.get(ENV_VAR, "")
    for name, (action, hits) in parse(spec).items():
        with _lock:
            _armed[name] = _Armed(action, hits)


def fault_point(name: str) -> None:
    """Fire if ``name`` is armed and this is the chosen hit; otherwise do nothing."""
    _load_env()
    with _lock:
        for reached in _recorders:
            reached.add(name)
        fired = None
        for key in (name, ANY):
            armed_point = _armed.get(key)
            if armed_point is None:
                continue
            armed_point.seen += 1
            if armed_point.seen >= armed_point.hits and fired is None:
                del _armed[key]
                fired = armed_point
        if fired is None:
            return
        armed_point = fired
    fired_log = os.environ.get(FIRED_LOG_VAR)
    if fired_log:
        with open(fired_log, "a") as log:  # one short append: whole lines even across processes
            log.write(f"{name} {armed_point.action} {os.getpid()}\n")
    if armed_point.action == "crash":
        os.write(2, f"onceflow: injected crash at fault point {name!r}\n".encode())
        os._exit(CRASH_EXIT_CODE)
    if armed_point.action == "hold":
        os.write(2, f"onceflow: held {HOLD_S:.0f} s at fault point {name!r}\n".encode())
        time.sleep(HOLD_S)
        return
    raise InjectedFault(name)
