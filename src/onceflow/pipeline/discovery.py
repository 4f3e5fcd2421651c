"""Find a pipeline's spec in the user's own code, not in a registry.

Two places say where a pipeline is:

- ``module[:attribute]``: the module that defines the ``PipelineSpec``
  (``my_pipelines.orders:ORDERS``), importable from the current path;
- a DAGs folder: every DAG file in it is imported, as Airflow's DAG processor
  would (the folder on ``sys.path``), and the specs its module holds are
  found by name. A DAG file that builds its DAG with ``pipeline_dag(SPEC)``
  and imports ``SPEC`` is enough.

Used by the CLI (``onceflow status``) and by the Spark entry point.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from onceflow.config.settings import ConfigurationError
from onceflow.pipeline.spec import PipelineSpec

DAGS_FOLDER_VARS = ("ONCEFLOW_DAGS_FOLDER", "AIRFLOW__CORE__DAGS_FOLDER")


def spec_in_module(name: str, location: str) -> PipelineSpec:
    """The spec named ``name`` at ``module[:attribute]``."""
    module_name, _, attr = location.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"--spec {location}: cannot import {module_name!r} ({exc}): "
                                 "put the module that defines the pipeline on PYTHONPATH") from None
    candidates = [getattr(module, attr, None)] if attr else list(vars(module).values())
    for spec in candidates:
        if isinstance(spec, PipelineSpec) and spec.name == name:
            return spec
    raise ConfigurationError(f"--spec {location}: no PipelineSpec named {name!r} there; name the module "
                             "(module or module:attribute) that defines it")


def _import_file(path: Path, folder: Path):
    # A unique name per file, registered while it runs, as the DAG processor does
    # (dataclasses and pickling look their module up in sys.modules).
    relative = path.relative_to(folder).with_suffix("")
    module_name = "onceflow_discovered_" + "_".join(relative.parts)
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _import_dag_files(folder: Path) -> tuple[list, dict[str, str]]:
    """(modules, import errors by file) of the DAG files in ``folder``."""
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise ConfigurationError(f"DAGs folder {folder} does not exist: pass --dags-folder with the folder of your DAG files")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    modules: list = []
    errors: dict[str, str] = {}
    for path in sorted(folder.rglob("*.py")):
        if any(part.startswith(("_", ".")) for part in path.relative_to(folder).parts):
            continue
        try:
            modules.append(_import_file(path, folder))
        except Exception as exc:  # a broken DAG file must not hide the others
            errors[str(path)] = f"{type(exc).__name__}: {exc}"
    return modules, errors


def specs_in_folder(folder: Path) -> tuple[dict[str, PipelineSpec], dict[str, str]]:
    """(specs by name, import errors by file) of the DAG files in ``folder``."""
    modules, errors = _import_dag_files(folder)
    specs: dict[str, PipelineSpec] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, PipelineSpec):
                specs.setdefault(value.name, value)
    return specs, errors



def find_pipeline(name: str, spec: str | None = None, dags_folder: str | None = None) -> PipelineSpec:
    """The pipeline ``name``: at ``spec`` (module[:attribute]) when given, else
    in ``dags_folder`` or the folder ``ONCEFLOW_DAGS_FOLDER`` /
    ``AIRFLOW__CORE__DAGS_FOLDER`` names."""
    if spec:
        return spec_in_module(name, spec)
    folder = dags_folder or next((os.environ[v] for v in DAGS_FOLDER_VARS if os.environ.get(v)), None)
    if not folder:
        raise ConfigurationError(
            f"where is pipeline {name!r} defined? Pass --spec module:ATTRIBUTE or --dags-folder DIR "
            f"(or set {' or '.join(DAGS_FOLDER_VARS)})"
        )
    specs, errors = specs_in_folder(Path(folder))
    if name in specs:
        return specs[name]
    detail = "".join(f"\n  {path}: {error}" for path, error in errors.items())
    raise ConfigurationError(
        f"no pipeline named {name!r} in the DAG files of {folder}; found {sorted(specs) or 'none'}"
        + (f". Files that did not import:{detail}" if detail else "")
    )
