"""The second PySpark's environment is made once, whole or not at all, and pinned exactly; its
reader takes a REST catalog only. pip, venv and Maven are replaced by fakes that record the calls."""

from __future__ import annotations

import pytest

from onceflow_devkit.services import pyspark_env as env_module
from onceflow_devkit.services.process import ServiceError
from onceflow_devkit.services.spark_table_reader import read_table


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """The cache under ``tmp_path``; each command the make runs is recorded and, for the venv, leaves its python."""
    monkeypatch.setenv("ONCEFLOW_JAR_CACHE", str(tmp_path / "cache"))
    jar = tmp_path / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
    jar.write_bytes(b"jar")
    ran: list[list[str]] = []
    failing: list[str] = []

    def run(argv, what):
        ran.append(argv)
        if any(word in what for word in failing):
            raise ServiceError(f"{what} failed")
        if "venv" in argv:
            python = tmp_path / argv[-1] / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text("")

    monkeypatch.setattr(env_module, "_run", run)
    monkeypatch.setattr(env_module.spark_iceberg, "runtime_jar", lambda spark_line: jar)
    return ran, failing, jar


def test_the_environment_is_made_once_and_then_found_by_its_stamp(fakes):
    ran, _, jar = fakes
    assert env_module.existing() is None
    made = env_module.pyspark_env()
    assert [argv[-1] for argv in ran] == [str(made.python.parent.parent), "py4j==0.10.9.9"]
    assert made.jars == (jar,) and made.pyspark == env_module.PYSPARK
    assert env_module.pyspark_env() == made and len(ran) == 2  # nothing run again
    assert env_module.existing() == made


def test_a_failed_make_leaves_no_stamp_and_the_next_call_starts_over(fakes):
    ran, failing, _ = fakes
    failing.append("PyPI")
    with pytest.raises(ServiceError, match="PyPI"):
        env_module.pyspark_env()
    assert env_module.existing() is None
    failing.clear()
    assert env_module.pyspark_env().python.exists() and len(ran) == 4  # venv and pip again, from nothing


def test_an_environment_whose_jar_is_gone_is_made_again(fakes):
    ran, _, jar = fakes
    env_module.pyspark_env()
    jar.unlink()
    assert env_module.existing() is None


def test_every_requirement_is_pinned_exactly_and_the_runtime_line_is_the_pysparks():
    assert all("==" in requirement for requirement in env_module.REQUIREMENTS)
    assert env_module.PYSPARK.startswith(env_module.SPARK_LINE + ".") and env_module.SPARK_LINE == "4.1"


def test_the_reader_takes_a_rest_catalog_only():
    with pytest.raises(ServiceError, match="REST catalog"):
        read_table({"type": "sql", "uri": "sqlite:///x.db"}, "ns.t")
