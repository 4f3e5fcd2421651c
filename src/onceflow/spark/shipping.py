"""What a pipeline's Spark job is given: its code, as zips for ``--py-files`` or
a Spark Connect session's artifacts, the spark-submit application, and its spec.

The spec reaches a spark-submit driver in the environment (``SPEC_VAR``), never as an
argument: its free-form ``params`` may hold a token, and arguments show in ``ps``, in the
task log and in the task's rendered fields (docs/deploying.md, "Security")."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
import zipfile
from pathlib import Path

from onceflow.config.settings import ConfigurationError
from onceflow.sinks import kind_module
from onceflow.pipeline.spec import PipelineSpec

# What spark-submit runs for a batch (``--py-files``: shipped_code).
SUBMIT_APPLICATION = Path(__file__).resolve().parent / "submit.py"
# The spec of the pipeline whose batch spark-submit runs (PipelineSpec.to_json()).
SPEC_VAR = "ONCEFLOW_SPEC_JSON"


def spec_from_environment(pipeline: str) -> PipelineSpec:
    """The spec ``SPEC_VAR`` holds (Spark driver); it must describe ``pipeline``."""
    text = os.environ.get(SPEC_VAR)
    if not text:
        raise ConfigurationError(f"no spec for pipeline {pipeline!r}: the spark task of pipeline_dag passes it in "
                                 f"${SPEC_VAR}; by hand, pass --spec module[:attribute] naming the module that defines it")
    spec = PipelineSpec.from_json(text)
    if spec.name != pipeline:
        raise ConfigurationError(f"${SPEC_VAR} describes pipeline {spec.name!r}, not --pipeline {pipeline!r}")
    return spec


def code_zip(module_name: str) -> str:
    """The top-level package (or single module) holding ``module_name``, as a
    zip for spark-submit ``--py-files``, built at DAG parse time from what is
    installed, never from a checkout.

    Named by a hash of its source files and published with an atomic rename:
    every task process re-parses the DAG, and a spark-submit reading the zip
    must never see one that another parse is rewriting."""
    top = module_name.split(".")[0]
    found = importlib.util.find_spec(top)
    if found is None or not found.origin:
        raise ConfigurationError(f"cannot ship {module_name!r} to Spark: no importable module or package {top!r}")
    origin = Path(found.origin)
    root, files = (origin.parent.parent, sorted(origin.parent.rglob("*.py"))) if origin.name == "__init__.py" else (origin.parent, [origin])
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    target = Path(tempfile.gettempdir()) / f"onceflow-{top}-{os.getuid()}-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        fd, scratch = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
                for path in files:
                    archive.write(path, str(path.relative_to(root)))
            os.replace(scratch, target)
        except BaseException:
            os.unlink(scratch)
            raise
    return str(target)


def library_zip() -> str:
    """The installed onceflow package, for ``--py-files``."""
    return code_zip(__name__)


def shipped_code(spec: PipelineSpec) -> list[str]:
    """The zips a pipeline's Spark job needs: onceflow, the transform's package, then the package of
    each sink kind installed from a package of its own (its data source runs on the executors)."""
    modules = [spec.transform.partition(":")[0], *(kind_module(s.kind) for s in spec.sinks)]
    tops = dict.fromkeys(m.split(".")[0] for m in modules if m.split(".")[0] != __name__.split(".")[0])
    return [library_zip(), *(code_zip(top) for top in tops)]
