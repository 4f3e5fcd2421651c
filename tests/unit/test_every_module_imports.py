"""Every module of the library and the dev kit imports: a name removed from one module and still
imported by another (a code path no other unit test reaches) fails here, not in a chaos run."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import onceflow
import onceflow_devkit

MODULES = sorted(m.name for package in (onceflow, onceflow_devkit)
                 for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}."))


@pytest.mark.parametrize("module", MODULES)
def test_module_imports(module):
    importlib.import_module(module)
