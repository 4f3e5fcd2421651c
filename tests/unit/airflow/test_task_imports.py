"""The task-imports plugin: Airflow's own plugin loading imports what onceflow's tasks need, and
nothing it imports leaves a thread behind (the scheduler forks its workers after loading it)."""

from __future__ import annotations

import json
import subprocess
import sys

from onceflow.airflow.task_imports import TASK_MODULES

LOAD_PLUGINS = """
import json, sys, threading
import airflow.sdk
threads = threading.active_count()
before = set(sys.modules)
from airflow import plugins_manager
plugins_manager.ensure_plugins_loaded()
names = [p.name for p in plugins_manager._get_plugins()[0]]
print(json.dumps({"plugins": names, "imported": sorted(set(sys.modules) - before),
                  "threads_before": threads, "threads_after": threading.active_count()}))
"""


def _load_plugins_in_a_fresh_interpreter() -> dict:
    done = subprocess.run([sys.executable, "-c", LOAD_PLUGINS], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_airflow_loading_its_plugins_imports_every_task_module_and_starts_no_thread():
    loaded = _load_plugins_in_a_fresh_interpreter()
    assert "onceflow_task_imports" in loaded["plugins"], loaded["plugins"]
    assert not [m for m in TASK_MODULES if m not in loaded["imported"]], loaded["imported"]
    assert loaded["threads_after"] == loaded["threads_before"]


def test_the_listed_modules_are_what_a_task_imports_and_not_spark():
    assert "onceflow.airflow.operators.batch" in TASK_MODULES
    assert not [m for m in TASK_MODULES if m.split(".")[0] in ("pyspark", "grpc")]
