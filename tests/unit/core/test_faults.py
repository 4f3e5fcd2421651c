"""Fault points: armed in-process or through ONCEFLOW_FAULTS; crash is a real os._exit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from onceflow.core import faults
from onceflow.config.settings import ConfigurationError

POINT = faults.declare("test.point", "used by this module only")


@pytest.fixture(autouse=True)
def clean():
    faults.disarm()
    yield
    faults.disarm()


OTHER = faults.declare("test.other_point", "used by this module only")


def test_a_point_fires_only_where_it_is_armed(tmp_path, monkeypatch):
    fired_log = tmp_path / "fired"
    monkeypatch.setenv(faults.FIRED_LOG_VAR, str(fired_log))
    faults.arm(OTHER, "raise")
    for _ in range(3):
        faults.fault_point(POINT)  # not armed: no error, no exit, nothing logged
    assert not fired_log.exists()
    assert faults.armed() == {OTHER: "raise@1"}  # another point's hits are its own
    with pytest.raises(faults.InjectedFault):
        faults.fault_point(OTHER)
    assert fired_log.read_text().split()[:2] == [OTHER, "raise"]


def test_raise_fires_once_on_the_chosen_hit():
    faults.arm(POINT, "raise", hits=2)
    faults.fault_point(POINT)
    with pytest.raises(faults.InjectedFault) as err:
        faults.fault_point(POINT)
    assert err.value.point == POINT
    faults.fault_point(POINT)  # disarmed after firing
    assert faults.armed() == {}


def test_any_point_fires_on_the_nth_step_reached():
    other = faults.declare("test.other", "used by this module only")
    faults.arm(faults.ANY, "raise", hits=3)
    faults.fault_point(POINT)
    faults.fault_point(other)
    with pytest.raises(faults.InjectedFault) as err:
        faults.fault_point(other)
    assert err.value.point == other and faults.armed() == {}


def test_env_spec_is_parsed_and_checked():
    import onceflow.core.coordinator  # noqa: F401  (declares its points)

    assert faults.parse("ledger.decision.after_write=crash, commit.between_effects=raise@2") == {
        "ledger.decision.after_write": ("crash", 1),
        "commit.between_effects": ("raise", 2),
    }
    assert faults.parse("*=crash@7") == {"*": ("crash", 7)}
    with pytest.raises(ConfigurationError, match="unknown fault point 'ledger.decison.after_write'; known points: .*ledger.decision.after_write"):
        faults.parse("ledger.decison.after_write=crash")
    with pytest.raises(ConfigurationError, match="must be one of crash, raise, hold"):
        faults.parse("commit.between_effects=explode")
    with pytest.raises(ConfigurationError, match="not name=action"):
        faults.parse("commit.between_effects")
    with pytest.raises(ConfigurationError, match="not an integer"):
        faults.parse("commit.between_effects=raise@two")


def test_a_held_point_stops_there_then_goes_on(monkeypatch):
    import onceflow.core.coordinator  # noqa: F401

    slept = []
    monkeypatch.setattr(faults.time, "sleep", slept.append)
    faults.arm("commit.between_effects", "hold")
    faults.fault_point("commit.between_effects")  # returns: the step goes on after the hold
    faults.fault_point("commit.between_effects")  # disarmed after firing once
    assert slept == [faults.HOLD_S]


def test_registry_lists_every_step_of_the_protocol():
    import onceflow.core.coordinator  # noqa: F401

    for kind in ("plan", "attempt", "vote", "decision", "done", "head"):
        assert {f"ledger.{kind}.before_write", f"ledger.{kind}.after_write"} <= set(faults.ALL_POINTS)
    assert {"commit.effect.before", "commit.effect.after", "commit.between_effects", "abort.effect.before"} <= set(faults.ALL_POINTS)


def test_env_armed_crash_kills_the_process_with_137():
    code = "import onceflow.core.coordinator as c; from onceflow import faults; faults.fault_point('commit.between_effects'); print('survived')"
    env = {"ONCEFLOW_FAULTS": "commit.between_effects=crash"}
    import os

    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == faults.CRASH_EXIT_CODE
    assert "survived" not in proc.stdout and "injected crash at fault point 'commit.between_effects'" in proc.stderr


def test_a_point_armed_by_environment_may_be_declared_by_a_module_this_process_never_imported():
    """ONCEFLOW_FAULTS reaches Airflow tasks, the Spark driver and Spark's
    workers alike; each must accept names only another one declares."""
    import subprocess
    import sys

    code = (
        "from onceflow import coordinator\n"  # not batch_job, which declares job.*
        "from onceflow import faults\n"
        "faults.fault_point('commit.effect.before')\n"
        "print('ok')\n"
    )
    env = {**__import__("os").environ, "ONCEFLOW_FAULTS": "job.after_votes=raise"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    bad = subprocess.run([sys.executable, "-c", code], env={**env, "ONCEFLOW_FAULTS": "job.after_vots=raise"},
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "unknown fault point 'job.after_vots'" in bad.stderr


def _fresh_python(code: str) -> str:
    """What ``code`` prints in a process of its own (nothing imported yet)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_sink_kinds_own_package_declares_its_points_through_its_entry_point():
    """A point of a kind installed from a package of its own (examples/postgres_sink, in the dev
    environment) may be armed by name in a process that never imported that package."""
    code = (
        "from onceflow.core import faults\n"
        "faults.arm('postgres.commit.between_splits', 'raise')\n"
        "print(sorted(p for p in faults.ALL_POINTS if p.startswith('postgres.')))\n"
    )
    assert _fresh_python(code) == "['postgres.commit.between_splits', 'postgres.precommit.after_prepare']"


def test_code_shipped_without_its_metadata_takes_the_names_it_is_armed_with():
    """A Spark executor given onceflow as a zip has no entry points to list the declaring modules: a
    name checked where the run was armed still arms there, and fires once its module is imported."""
    code = (
        "import importlib.metadata\n"
        "importlib.metadata.entry_points = lambda **selection: []\n"
        "from onceflow.core import faults\n"
        "faults.arm('kafka.commit.after_end_txn', 'raise')\n"
        "from onceflow.sinks.kafka import participant\n"
        "try:\n"
        "    faults.fault_point(participant.AFTER_END_TXN)\n"
        "except faults.InjectedFault:\n"
        "    print('fired')\n"
    )
    assert _fresh_python(code) == "fired"


def test_a_run_param_arms_faults_only_where_the_workers_opted_in(monkeypatch):
    monkeypatch.delenv(faults.RUN_PARAM_GUARD, raising=False)
    with pytest.raises(ConfigurationError, match=f"{faults.RUN_PARAM_GUARD}={faults.RUN_PARAM_GUARD_VALUE}"):
        faults.arm_run_param(f"{POINT}=raise")
    assert faults.armed() == {}
    faults.arm_run_param(None)  # no param: nothing to check, nothing armed

    monkeypatch.setenv(faults.RUN_PARAM_GUARD, faults.RUN_PARAM_GUARD_VALUE)
    faults.arm_run_param(f"{POINT}=raise@2")
    assert faults.armed() == {POINT: "raise@2"}
    with pytest.raises(ConfigurationError, match="unknown fault point"):
        faults.arm_run_param("no.such.point=crash")


def test_a_fired_point_is_logged_before_it_fires(monkeypatch, tmp_path):
    log = tmp_path / "fired.log"
    monkeypatch.setenv(faults.FIRED_LOG_VAR, str(log))
    faults.arm(POINT, "raise", hits=2)
    faults.fault_point(POINT)
    assert not log.exists()  # reached but not fired: nothing logged
    with pytest.raises(faults.InjectedFault):
        faults.fault_point(POINT)
    import os

    assert log.read_text() == f"{POINT} raise {os.getpid()}\n"


def test_a_spark_connect_job_is_armed_as_a_fresh_driver_would_be(monkeypatch):
    # The job's driver is the spark task's process: inside the job, what an earlier task or try
    # left armed (or fired) is gone and the environment's and the run's faults are armed anew, each
    # from its first hit; after the job, the process is armed as it was.
    monkeypatch.setenv(faults.ENV_VAR, "test.point=raise@2")
    monkeypatch.setenv(faults.RUN_PARAM_GUARD, faults.RUN_PARAM_GUARD_VALUE)
    faults.arm("*", "crash", hits=5)
    with faults.armed_for_job("commit.between_effects=raise"):
        assert faults.armed() == {"test.point": "raise@2", "commit.between_effects": "raise@1"}
        faults.fault_point(POINT)
        with pytest.raises(faults.InjectedFault):
            faults.fault_point(POINT)
    assert faults.armed() == {"*": "crash@5"}
    monkeypatch.delenv(faults.RUN_PARAM_GUARD)
    with pytest.raises(ConfigurationError, match="ONCEFLOW_FAULT_INJECTION"):
        with faults.armed_for_job("commit.between_effects=raise"):
            pass


def test_a_spark_connect_jobs_faults_reach_the_servers_workers_as_a_writer_option(monkeypatch):
    # The server's Python workers do not inherit the task's environment: inside armed_for_job the
    # run's param goes into the writers' options, and a writer method is armed with it for the call.
    from dataclasses import dataclass

    from onceflow.sinks.writer_options import FAULTS_OPTION, armed_as_job, job_fault_options

    monkeypatch.setenv(faults.RUN_PARAM_GUARD, faults.RUN_PARAM_GUARD_VALUE)
    assert job_fault_options() == {}  # spark-submit: the workers read ONCEFLOW_FAULTS
    with faults.armed_for_job(f"{POINT}=raise"):
        options = job_fault_options()
    assert options == {FAULTS_OPTION: f"{POINT}=raise"} and job_fault_options() == {}

    @dataclass
    class Options:
        faults: str

    class Writer:
        def __init__(self, spec: str):
            self.options = Options(spec)

        @armed_as_job
        def write(self) -> str:
            faults.fault_point(POINT)
            return "written"

    with pytest.raises(faults.InjectedFault):
        Writer(options[FAULTS_OPTION]).write()
    assert Writer("").write() == "written" and faults.armed() == {}
    monkeypatch.delenv(faults.RUN_PARAM_GUARD)  # a server that does not allow injection refuses the job
    with pytest.raises(ConfigurationError, match="ONCEFLOW_FAULT_INJECTION"):
        Writer(options[FAULTS_OPTION]).write()


def test_every_module_that_declares_a_point_is_listed_in_its_packages_entry_points():
    """A module missing from the list would arm nowhere but where it happens to be imported."""
    import ast
    import tomllib

    from tests.support import ROOT

    kinds = sorted(ROOT.glob("examples/*_sink"))  # the example sink kinds' packages
    for project, sources in ((ROOT, ROOT / "src"), *((kind, kind) for kind in kinds)):
        listed = set(tomllib.loads((project / "pyproject.toml").read_text())["project"]["entry-points"]
                     .get(faults.ENTRY_POINT_GROUP, {}).values())
        declaring = set()
        for path in sources.rglob("*.py"):
            calls = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
                     and getattr(n.func, "attr", getattr(n.func, "id", None)) == "declare"]
            if calls and path.name != "faults.py":
                declaring.add(".".join(path.relative_to(sources).with_suffix("").parts))
        assert declaring == listed, f"{project.name}: declaring {sorted(declaring)}, listed {sorted(listed)}"


def test_a_recording_collects_every_point_reached_armed_or_not_and_only_inside_it():
    point = faults.declare("test.recorded", "a point of this test")
    faults.fault_point(point)
    with faults.recording() as reached:
        faults.fault_point(point)
        faults.arm(point, "raise")
        with pytest.raises(faults.InjectedFault):
            faults.fault_point(point)
    faults.fault_point(point)
    assert reached == {point}


def test_a_point_is_listed_when_an_entry_point_names_the_module_that_declared_it():
    unlisted = faults.declare("test.unlisted", "declared by a test module, which no entry point names")
    assert faults.DECLARED_IN[unlisted] == __name__
    listed = faults.listed_points()
    assert unlisted not in listed and "files.commit.before_publish" in listed
