"""A caller killed with SIGKILL: nothing of its Airflow may keep running for long."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from onceflow_devkit.local_airflow import LocalAirflow
from tests.integration.devkit.local_airflow.conftest import DAGS


@pytest.mark.slow
def test_a_sigkilled_caller_loses_its_leaders_and_stop_on_the_home_removes_the_rest(airflow_homes):
    home = airflow_homes / "crash"
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from onceflow_devkit.local_airflow import LocalAirflow
        airflow = LocalAirflow(Path({str(home)!r}), Path({str(DAGS)!r}))
        airflow.start(timeout=180)
        print("started", flush=True)
        time.sleep(600)
        """
    )
    caller = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert caller.stdout.readline().strip() == "started"
        airflow = LocalAirflow(home, DAGS)
        assert airflow.is_running()
        leaders = {c: airflow.process(c).running_pid() for c in ("api-server", "scheduler", "dag-processor")}
        everything = airflow.processes()
    finally:
        caller.send_signal(signal.SIGKILL)
        caller.wait()
    deadline = time.monotonic() + 10
    while airflow.is_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    # The components die with their caller (PR_SET_PDEATHSIG) ...
    assert not airflow.is_running(), leaders
    # ... and whatever they forked is found through the home and stopped.
    LocalAirflow(home, DAGS).stop(grace=0)
    assert airflow.processes() == []
    assert [pid for pid in everything if os.path.exists(f"/proc/{pid}") and _not_zombie(pid)] == []


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False
