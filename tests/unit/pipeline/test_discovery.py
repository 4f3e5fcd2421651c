"""Pipelines are found in the user's own code: a module path or a DAGs folder."""

from __future__ import annotations


import pytest

from onceflow.pipeline.discovery import find_pipeline
from onceflow.config.settings import ConfigurationError

from tests.doubles.specs import ORDERS


def test_a_pipeline_is_found_by_module_path():
    assert find_pipeline("orders", spec="tests.doubles.specs:ORDERS") is ORDERS
    assert find_pipeline("orders", spec="tests.doubles.specs") is ORDERS


def test_a_pipeline_is_found_in_the_dag_files_that_build_it(monkeypatch, tmp_path):
    monkeypatch.setenv("ONCEFLOW_WAREHOUSE", f"file://{tmp_path}")
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "orders_exactly_once.py").write_text(
        "from onceflow.airflow.dag_factory import pipeline_dag\nfrom tests.doubles.specs import ORDERS\n\n"
        "dag = pipeline_dag(ORDERS)\n")
    assert find_pipeline("orders", dags_folder=str(tmp_path / "dags")) is ORDERS


def test_an_unknown_pipeline_lists_what_is_there_and_the_files_that_broke(monkeypatch, tmp_path):
    monkeypatch.setenv("ONCEFLOW_WAREHOUSE", f"file://{tmp_path}")
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "mine.py").write_text("from tests.doubles.specs import ORDERS\n")
    (tmp_path / "dags" / "broken.py").write_text("raise RuntimeError('typo in this DAG')\n")
    with pytest.raises(ConfigurationError, match=r"(?s)found \['orders'\].*broken.py: RuntimeError: typo in this DAG"):
        find_pipeline("payments", dags_folder=str(tmp_path / "dags"))


def test_without_a_place_to_look_the_error_says_how_to_name_one(monkeypatch):
    for var in ("ONCEFLOW_DAGS_FOLDER", "AIRFLOW__CORE__DAGS_FOLDER"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigurationError, match="--spec module:ATTRIBUTE or --dags-folder DIR"):
        find_pipeline("orders")
