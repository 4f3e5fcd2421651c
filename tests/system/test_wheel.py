"""onceflow as a user installs it: the built wheel in a fresh venv, nothing of
the checkout on its path, the example DAG copied into a DAGs folder of its own,
one batch through Airflow against the embedded stack, audited.

The fresh venv gets the wheels of the library and of the example pipeline
(user code), installed by pip with their dependencies resolved from the
registry (pip's cache makes a second run quick). The dev kit is not importable
there: it only starts the services and the Airflow processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import ROOT
DEV_KIT_PARTS = ("onceflow_devkit", "onceflow_examples", "services/", "local_airflow/", "chaos/", "clickstream_audit",
                 "clickstream_oracle", "demo.py", "tests/")


def build_wheel(source: Path, out: Path, parts: tuple[str, ...]) -> Path:
    """``pip wheel`` of a copy of ``parts`` of ``source`` (the checkout gets no build/ or egg-info)."""
    tree = out / f"src-{source.name}"
    tree.mkdir(parents=True)
    for part in parts:
        (shutil.copytree if (source / part).is_dir() else shutil.copy)(source / part, tree / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--disable-pip-version-check",
                    "-w", str(out), str(tree)], check=True, capture_output=True, timeout=600)
    (wheel,) = [w for w in out.glob("*.whl") if w.name.split("-")[0] in {"onceflow", "onceflow_examples"}
                and w.stat().st_mtime >= tree.stat().st_mtime]
    return wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    library = build_wheel(ROOT, out / "library", ("pyproject.toml", "README.md", "src"))
    example = build_wheel(ROOT / "examples", out / "examples", ("pyproject.toml", "onceflow_examples"))
    return {"library": library, "example": example}


def test_the_wheel_holds_the_library_and_nothing_of_the_dev_kit(wheels):
    names = zipfile.ZipFile(wheels["library"]).namelist()
    assert all(n.startswith(("onceflow/", "onceflow-")) for n in names), sorted(names)[:20]
    assert not [n for n in names if any(part in n for part in DEV_KIT_PARTS)]
    assert {"onceflow/spark/submit.py", "onceflow/airflow/dag_factory.py", "onceflow/provider.py", "onceflow/ops/cli.py",
            "onceflow/airflow/ui/templates/index.html"} <= set(names)
    entry_points = next(zipfile.ZipFile(wheels["library"]).read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "[apache_airflow_provider]" in entry_points and "onceflow.provider:get_provider_info" in entry_points
    metadata = next(zipfile.ZipFile(wheels["library"]).read(n).decode() for n in names if n.endswith("/METADATA"))
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert any(r.startswith("Requires-Dist: apache-airflow") for r in requires), requires
    runtime = [r for r in requires if "extra ==" not in r]
    assert not [r for r in runtime if any(dev in r for dev in ("moto", "noida", "calfkit", "psutil", "pytest"))], requires
    # The sink conformance kit ships with the library; pytest only with its extra.
    assert "onceflow/testing/conformance.py" in names
    assert [r for r in requires if "pytest" in r] == ['Requires-Dist: pytest>=8; extra == "testing"'], requires


def pinned(package: str) -> str:
    """The version requirements.txt pins ``package`` at: the one the tests ran against."""
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        if name.split("[")[0].strip().lower() == package:
            return version.strip()
    raise AssertionError(f"requirements.txt pins no {package}")


@pytest.mark.slow  # pip resolves Airflow's whole tree from the registry: a minute or more
def test_a_plain_pip_install_of_the_wheel_lands_on_the_pandas_pyarrow_and_pyspark_the_tests_ran(wheels, tmp_path):
    """Without constraints.txt, as a user may install it: PySpark's own requirements admit pandas 3, which
    it does not fully support; the wheel's ranges must keep pip on the majors requirements.txt pins."""
    import json

    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                           "--disable-pip-version-check", "--report", str(report), str(wheels["library"])],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    resolved = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in json.loads(report.read_text())["install"]}
    assert resolved["pyspark"] == pinned("pyspark"), resolved["pyspark"]
    for package in ("pandas", "pyarrow"):
        assert resolved[package].split(".")[0] == pinned(package).split(".")[0], (package, resolved[package], pinned(package))


@pytest.fixture(scope="module")
def fresh_venv(wheels, tmp_path_factory) -> Path:
    """A venv where pip installed the two wheels and resolved their dependencies from the registry
    (pinned by constraints.txt, as README's install section says), with psycopg, the driver of the
    deployment's metadata database. No repair step follows."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "-c", str(ROOT / "constraints.txt"), str(wheels["library"]), str(wheels["example"]),
                           "psycopg[binary]"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    return python


def test_pip_leaves_pyspark_whole_and_every_requirement_met(fresh_venv):
    # The Spark provider's pyspark-client installs into PySpark's folder: the same bytes at one version.
    whole = subprocess.run([str(fresh_venv), str(ROOT / "devkit" / "onceflow_devkit" / "pyspark_files.py")],
                           capture_output=True, text=True, timeout=300, cwd="/")
    assert whole.returncode == 0, whole.stderr
    check = subprocess.run([str(fresh_venv), "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout


def test_the_fresh_venv_imports_onceflow_from_the_wheel_and_not_the_dev_kit(fresh_venv):
    probe = (
        "import sys, onceflow, onceflow_examples; print(onceflow.__file__); print(onceflow_examples.__file__)\n"
        "print([p for p in sys.path if p.startswith(%r)])\n"
        "try:\n    import onceflow_devkit\nexcept ImportError:\n    print('no dev kit')\n" % str(ROOT)
    )
    out = subprocess.run([str(fresh_venv), "-c", probe], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd="/")
    assert out.returncode == 0, out.stderr
    library, example, checkout_paths, devkit = out.stdout.splitlines()
    venv = str(fresh_venv.parent.parent)
    assert library.startswith(venv) and example.startswith(venv), out.stdout
    assert checkout_paths == "[]" and devkit == "no dev kit", out.stdout
    onceflow_cli = subprocess.run([str(fresh_venv.parent / "onceflow"), "--help"], capture_output=True, text=True, timeout=120)
    # The library's own commands only: the dev kit's (services, demo, chaos, oracle-audit...) come with the dev kit.
    assert onceflow_cli.returncode == 0 and onceflow_cli.stdout.startswith("usage: onceflow [-h] {status,recover,split,skip,acls,audit} ..."), onceflow_cli.stdout


# Not marked slow: it is the suite's only proof that the installed wheel works on its own.
def test_one_batch_runs_through_airflow_from_the_installed_wheel(fresh_venv, tmp_path, postgres_server):
    from onceflow.kafka.admin import ensure_topics
    from onceflow.pipeline.runtime import Deployment, PipelineRuntime
    from onceflow_devkit.airflow_env import onceflow_airflow
    from onceflow_devkit.audit.clickstream_audit import audit_clickstream
    from onceflow_devkit.services.iceberg_catalog import embedded_catalogs
    from onceflow_devkit.services.kafka_broker import DEFAULT_BROKER, start_broker
    from onceflow_devkit.services.process import ManagedProcess
    from onceflow_examples.clickstream import CLICKSTREAM
    from onceflow_examples.clickstream_data import generate, produce

    proc = ManagedProcess("wheel-kafka", tmp_path / "kafka").reset()
    broker = start_broker(DEFAULT_BROKER, proc, die_with_parent=True)
    try:
        ensure_topics(broker.config(), ["clicks", *(s.target for s in CLICKSTREAM.sinks if s.kind == "kafka")])
        produced = produce(broker.config(), "clicks", generate(400, seed=19, malformed_ratio=0.1))
        dags = tmp_path / "dags"
        dags.mkdir()
        shutil.copy(ROOT / "dags" / "clickstream_exactly_once.py", dags)
        warehouse = f"file://{tmp_path}/warehouse"
        # No plugins folder either: Airflow puts it on sys.path, and nothing of the checkout may be there.
        airflow = onceflow_airflow(tmp_path / "airflow", broker, warehouse, dags_folder=dags, python=fresh_venv, plugins_folder=None,
                                   postgres=postgres_server, extra_env={"ONCEFLOW_SCHEDULE": "none", "PYTHONPATH": ""})
        airflow.migrate()
        result = airflow.dags_test("clickstream_exactly_once", conf={"max_records_per_partition": 10_000}, timeout=900)
        assert result.succeeded, result.describe()
        log = result.log_file.read_text()
        # The spark task submitted the application of the installed wheel, not a checkout's.
        installed_submit = next(fresh_venv.parent.parent.glob("lib/python3*/site-packages/onceflow/spark/submit.py"))
        assert str(installed_submit) in log, result.describe()
        runtime = PipelineRuntime(CLICKSTREAM, Deployment(warehouse, broker, catalogs=embedded_catalogs(warehouse)))
        report = audit_clickstream(runtime)
        assert report.ok and report.input_records == produced and report.committed_batches == 1, report.summary()
    finally:
        proc.stop(grace=2)
