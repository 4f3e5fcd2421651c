"""Helpers shared by tests (not fixtures: those are in conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onceflow_devkit.services.kafka_broker import KafkaBroker

# The repository: tests at any depth find files here without counting parents.
ROOT = Path(__file__).resolve().parent.parent


def require(broker: KafkaBroker, capability: str) -> None:
    """Skip, naming the behaviour, when ``broker`` lacks ``capability``.

    A test that a broker cannot support is skipped with that reason, never
    weakened (docs/testing.md, "Broker capabilities")."""
    if not broker.has(capability):
        pytest.skip(reason=f"{broker.name} lacks: {capability}")
