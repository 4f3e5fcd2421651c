"""Nothing the dev kit starts depends on the length of the checkout's path.

A Unix socket's path may not pass 107 bytes: PostgreSQL's, under a checkout in a folder of 40
characters, kept every test that needs PostgreSQL from starting. Here the repository is cloned
into a folder whose path is 150 characters long, and that clone's own code starts every
service there (every_service.py), its state under the clone, as ``make test`` does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import onceflow
import onceflow_devkit
import onceflow_examples
import onceflow_postgres_sink
from onceflow_devkit.services.process import _die_with_parent
from tests.conftest import TEST_HOME
from tests.support import ROOT

LONG_PATH = 150  # characters: a socket's path under it would pass 107 bytes
PACKAGES = (onceflow, onceflow_devkit, onceflow_examples, onceflow_postgres_sink)
# Started side by side, one process each, so that the JVMs' starts overlap.
SERVICE_GROUPS = (("stack", "redis", "compatible-brokers"), ("spark-connect", "iceberg-rest"), ("hdfs", "spark-standalone"))


def _package_roots() -> list[Path]:
    """Where this checkout keeps each package, relative to it: the clone's are at the same places."""
    try:
        return [Path(p.__file__).resolve().parents[1].relative_to(ROOT) for p in PACKAGES]
    except ValueError:
        pytest.skip(reason=f"the packages are not imported from the checkout {ROOT}: nothing to clone them from")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def long_checkout() -> Path:
    """This checkout cloned into a folder whose path is 150 characters long: HEAD with the changes to
    files git tracks (``git stash create``, which touches nothing here); new files count once added.
    Under TEST_HOME: PostgreSQL's user may pass through (when root), and the next session removes it."""
    if not (ROOT / ".git").exists():
        pytest.skip(reason=f"{ROOT} is not a git checkout: nothing to clone")
    base = f"{TEST_HOME}/checkout-"
    clone = Path(base + "x" * max(0, LONG_PATH - len(base)))
    clone.parent.mkdir(parents=True, exist_ok=True)
    code = _git("-C", str(ROOT), "stash", "create") or _git("-C", str(ROOT), "rev-parse", "HEAD")
    _git("clone", "--quiet", "--shared", "--no-checkout", str(ROOT), str(clone))  # --shared: this one's objects
    _git("-C", str(clone), "checkout", "--quiet", "--detach", code)
    yield clone
    shutil.rmtree(clone, ignore_errors=True)


def _start(checkout: Path, names: tuple[str, ...]) -> subprocess.Popen:
    path = os.pathsep.join(str(checkout / root) for root in ("", *map(str, _package_roots())))
    return subprocess.Popen([sys.executable, "-m", "tests.integration.devkit.services.every_service", *names],
                            cwd=checkout, env={**os.environ, "PYTHONPATH": path}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)


def _started(checkout: Path, *groups: tuple[str, ...], timeout: float) -> dict[str, dict]:
    """Each service that every_service.py started from ``checkout``, by name, after checking that
    it ran the checkout's own packages and kept each service's state inside it."""
    children = [_start(checkout, names) for names in groups]
    services: dict[str, dict] = {}
    try:
        for names, child in zip(groups, children):
            out, err = child.communicate(timeout=timeout)
            assert child.returncode == 0, f"starting {names} from {checkout} failed:\n{err[-4000:]}"
            first, *lines = [json.loads(line) for line in out.splitlines()]
            expected = {p.__name__: str(checkout / root) for p, root in zip(PACKAGES, _package_roots())}
            assert {name: str(Path(file).parents[1]) for name, file in first["packages"].items()} == expected
            services.update({line["service"]: line for line in lines})
    finally:
        for child in children:  # a failure or a timeout leaves the others running: they stop what they started
            child.terminate()
            child.wait(timeout=120)
    outside = {name: s["state"] for name, s in services.items() if not Path(s["state"]).is_relative_to(checkout)}
    assert not outside, f"state outside the checkout: {outside}"
    return services


def test_every_service_starts_from_a_checkout_whose_path_is_150_characters_long(long_checkout):
    assert len(str(long_checkout)) >= LONG_PATH
    services = _started(long_checkout, *SERVICE_GROUPS, timeout=400)
    assert sorted(services) == ["hdfs", "iceberg-rest", "kafka", "kafka-noida", "kafka-tansu", "postgres", "redis",
                                "s3", "spark-connect", "spark-standalone"], services


@pytest.mark.slow  # Airflow's metadata database is migrated on the clone's new PostgreSQL first
def test_airflow_starts_and_parses_the_dags_of_a_checkout_whose_path_is_150_characters_long(long_checkout):
    services = _started(long_checkout, ("airflow",), timeout=900)
    assert sorted(services) == ["airflow", "postgres", "redis"], services
    assert Path(services["airflow"]["dags"]).is_relative_to(long_checkout), services["airflow"]
