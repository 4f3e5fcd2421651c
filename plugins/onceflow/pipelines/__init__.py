"""The pipelines this project ships, by name (specs are ``onceflow.spec.PipelineSpec``).

Values are ``"module:attribute"`` so that listing pipelines imports nothing
heavy; ``get_pipeline`` imports the one asked for. Add a pipeline by adding
its spec's location here.
"""

from __future__ import annotations

import importlib

from ..settings import ConfigurationError
from ..spec import PipelineSpec

REGISTRY: dict[str, str] = {"clickstream": "onceflow.pipelines.clickstream:CLICKSTREAM"}


def get_pipeline(name: str, registry: dict[str, str] | None = None) -> PipelineSpec:
    registry = REGISTRY if registry is None else registry
    if name not in registry:
        raise ConfigurationError(f"no pipeline named {name!r}; registered: {sorted(registry)} "
                                 "(add yours to onceflow.pipelines.REGISTRY)")
    module, _, attr = registry[name].partition(":")
    spec = getattr(importlib.import_module(module), attr)
    if spec.name != name:
        raise ConfigurationError(f"onceflow.pipelines.REGISTRY[{name!r}] points at pipeline {spec.name!r}")
    return spec
