"""The library stands alone: import-linter's contracts (pyproject.toml) hold,
moved modules say where they went, and Airflow finds the provider."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT


def test_the_import_contracts_hold():
    """The library imports nothing of the dev kit or the examples, the examples
    nothing of the dev kit, and neither library nor dev kit has an import cycle."""
    result = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "5 kept, 0 broken" in result.stdout, result.stdout[-2000:]


@pytest.mark.parametrize(
    "old, new",
    [
        ("onceflow.services.kafka_broker", "onceflow_devkit.services"),
        ("onceflow.pipelines.clickstream", "onceflow_examples"),
        ("onceflow.protocol.coordinator", "onceflow.coordinator"),
        ("onceflow.files.s3", "onceflow.storage.s3"),
        ("onceflow.ledger.local", "onceflow.storage.local"),
        ("onceflow.spark.vote_handoff", "onceflow.sinks.votes"),
    ],
)
def test_an_import_of_a_moved_module_names_the_new_one(old, new):
    with pytest.raises(ModuleNotFoundError, match=f"moved: import {new}"):
        __import__(old)


def test_an_unknown_module_is_a_plain_module_not_found():
    with pytest.raises(ModuleNotFoundError, match="No module named 'onceflow.no_such_module'"):
        __import__("onceflow.no_such_module")


def test_airflow_finds_the_provider_its_hooks_and_connection_types():
    code = (
        "from airflow.providers_manager import ProvidersManager as M; m = M(); "
        "p = m.providers['onceflow']; h = m.hooks; "
        "print(p.version, h['onceflow_kafka'].hook_class_name, h['onceflow_s3'].hook_class_name)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    version, kafka_hook, s3_hook = result.stdout.split()[-3:]
    import onceflow

    assert version == onceflow.__version__
    assert (kafka_hook, s3_hook) == ("onceflow.hooks.kafka.KafkaConfigHook", "onceflow.hooks.s3.S3ConnectionHook")
