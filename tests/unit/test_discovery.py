"""Pipelines are found in the user's own code: a module path or a DAGs folder."""

from __future__ import annotations


import pytest

from onceflow.pipeline.discovery import find_pipeline
from onceflow.config.settings import ConfigurationError
from onceflow_examples.clickstream import CLICKSTREAM

from tests.support import ROOT


def test_a_pipeline_is_found_by_module_path():
    assert find_pipeline("clickstream", spec="onceflow_examples.clickstream:CLICKSTREAM") is CLICKSTREAM
    assert find_pipeline("clickstream", spec="onceflow_examples.clickstream") is CLICKSTREAM


def test_a_pipeline_is_found_in_the_dag_files_that_build_it(monkeypatch, tmp_path):
    monkeypatch.setenv("ONCEFLOW_WAREHOUSE", f"file://{tmp_path}")
    assert find_pipeline("clickstream", dags_folder=str(ROOT / "dags")).name == "clickstream"


def test_an_unknown_pipeline_lists_what_is_there_and_the_files_that_broke(monkeypatch, tmp_path):
    monkeypatch.setenv("ONCEFLOW_WAREHOUSE", f"file://{tmp_path}")
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "mine.py").write_text("from onceflow_examples.clickstream import CLICKSTREAM\n")
    (tmp_path / "dags" / "broken.py").write_text("raise RuntimeError('typo in this DAG')\n")
    with pytest.raises(ConfigurationError, match=r"(?s)found \['clickstream'\].*broken.py: RuntimeError: typo in this DAG"):
        find_pipeline("orders", dags_folder=str(tmp_path / "dags"))


def test_without_a_place_to_look_the_error_says_how_to_name_one(monkeypatch):
    for var in ("ONCEFLOW_DAGS_FOLDER", "AIRFLOW__CORE__DAGS_FOLDER"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigurationError, match="--spec module:ATTRIBUTE or --dags-folder DIR"):
        find_pipeline("orders")
