"""The library stands alone: import-linter's contracts (pyproject.toml) hold,
its layers included; moved modules say where they went, renamed ones still
import as their new selves; and Airflow finds the provider."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from onceflow.compat.moved_modules import SPLIT, renamed
from tests.support import ROOT


def test_the_import_contracts_hold():
    """The library imports nothing of the dev kit or the examples, the examples
    nothing of the dev kit, each layer of the library only those below it, and
    neither library nor dev kit has an import cycle."""
    result = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "6 kept, 0 broken" in result.stdout, result.stdout[-2000:]


def test_every_module_of_the_library_lives_in_a_layer_but_the_package_face_and_the_provider_entry_point():
    import tomllib

    import onceflow

    package = Path(onceflow.__file__).parent
    top = sorted(p.name for p in package.glob("*.py"))
    assert top == ["__init__.py", "provider.py"], top
    [contract] = [c for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
                  if c["type"] == "layers"]
    layers = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    folders = {p.parent.name for p in package.glob("*/__init__.py")}
    assert folders == layers, f"folders outside the layers contract: {folders - layers}; layers without a folder: {layers - folders}"


@pytest.mark.parametrize(
    "old, new",
    [
        ("onceflow.services.kafka_broker", "onceflow_devkit.services"),
        ("onceflow.pipelines.clickstream", "onceflow_examples"),
        ("onceflow.files.s3", "onceflow.storage.s3"),
        ("onceflow.ledger.local", "onceflow.storage.local"),
        ("onceflow.spark.vote_handoff", "onceflow.sinks.votes"),
    ],
)
def test_an_import_of_a_moved_module_names_the_new_one(old, new):
    with pytest.raises(ModuleNotFoundError, match=f"moved: import {new}"):
        __import__(old)


@pytest.mark.parametrize(
    "old, new, name",
    [
        ("onceflow.dag_factory", "onceflow.airflow.dag_factory", "pipeline_dag"),
        ("onceflow.protocol.plan", "onceflow.core.plan", "Plan"),  # a module under a renamed package
        ("onceflow.protocol.coordinator", "onceflow.core.coordinator", "Coordinator"),
        ("onceflow.kafka.sink", "onceflow.sinks.kafka.participant", "KafkaSinkParticipant"),
        ("onceflow.core.interval_planner", "onceflow.core.planning.interval_planner", "IntervalPlanner"),
        ("onceflow.interval_batches", "onceflow.core.planning.interval_planner", "committed_prefix"),
        ("onceflow.core.run_inputs", "onceflow.core.planning.run_inputs", "read_run_inputs"),
        ("onceflow.kafka.ids", "onceflow.sinks.kafka.ids", "transactional_id"),
        ("onceflow.sinks.votes", "onceflow.sinks.votes", "record_vote"),  # not renamed: itself, no warning
    ],
)
def test_an_import_of_a_renamed_module_is_the_new_module_with_a_warning(old, new, name):
    code = (
        "import importlib, warnings\n"
        f"new = importlib.import_module({new!r})\n"
        "warnings.filterwarnings('error', message='.* is now onceflow', category=DeprecationWarning)\n"
        "try:\n"
        f"    old = importlib.import_module({old!r})\n"
        "except DeprecationWarning as w:\n"
        "    print('warned:', w)\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        f"old = importlib.import_module({old!r})\n"
        f"exec('from {old} import {name} as thing')\n"
        f"print(old is new, thing is getattr(new, {name!r}), old.__spec__.name)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == f"True True {new}"
    warned = [line for line in lines if line.startswith("warned:")]
    # the warning names the outermost renamed name the import met (a renamed package before its module)
    first = next((old.rsplit(".", n)[0] for n in range(old.count("."), -1, -1) if renamed(old.rsplit(".", n)[0])), None)
    assert warned == ([] if first is None else
                      [f"warned: {first} is now {renamed(first)}: import that; the old name goes in a later release"])


@pytest.mark.parametrize("old, names", sorted(SPLIT.items()))
def test_a_name_of_a_module_that_became_a_package_imports_from_the_package_with_a_warning(old, names):
    for name, new in names.items():
        with pytest.warns(DeprecationWarning, match=f"{old}.{name} is now {new}.{name}"):
            thing = getattr(importlib.import_module(old), name)
        assert thing is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        importlib.import_module(old).no_such_name


def test_an_unknown_module_is_a_plain_module_not_found():
    with pytest.raises(ModuleNotFoundError, match="No module named 'onceflow.no_such_module'"):
        __import__("onceflow.no_such_module")


def test_airflow_finds_the_provider_its_hooks_connection_types_trigger_and_plugin():
    code = (
        "from airflow.providers_manager import ProvidersManager as M; m = M(); "
        "p = m.providers['onceflow']; h = m.hooks; "
        "print('HOOKS', p.version, h['onceflow_kafka'].hook_class_name, h['onceflow_s3'].hook_class_name); "
        "print('TRIGGERS', *sorted(t.trigger_class_name for t in m.trigger if t.package_name == 'onceflow')); "
        "print('PLUGINS', *sorted(x.plugin_class for x in m.plugins if x.provider_name == 'onceflow'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    said = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()
            if line.split()[:1] in (["HOOKS"], ["TRIGGERS"], ["PLUGINS"])}
    assert said["TRIGGERS"] == ["onceflow.airflow.triggers.input_lag"]
    assert said["PLUGINS"] == ["onceflow.airflow.ui.plugin.OnceflowPlugin"]
    version, kafka_hook, s3_hook = said["HOOKS"]
    import onceflow

    assert version == onceflow.__version__
    assert (kafka_hook, s3_hook) == ("onceflow.airflow.hooks.kafka.KafkaConfigHook", "onceflow.airflow.hooks.s3.S3ConnectionHook")
