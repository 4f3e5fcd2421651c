"""Imports sit at the top of each module of the library, but for the short list of
``onceflow_devkit.deferred_imports.DEFERRED``, which docs/developing.md shows."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from onceflow_devkit import deferred_imports, doc_blocks
from onceflow_devkit.deferred_imports import Deferred, function_imports, not_allowed, unused
from tests.support import ROOT

FOUND = deferred_imports.library_function_imports()


def test_every_function_level_import_of_the_library_is_on_the_short_list():
    strays = not_allowed(FOUND)
    assert not strays, ("import these at the top of their modules, or add a row with why to "
                        f"onceflow_devkit.deferred_imports.DEFERRED: {[str(s) for s in strays]}")


def test_every_row_of_the_short_list_still_allows_an_import():
    assert not unused(FOUND), f"rows that allow no import any more (remove them): {unused(FOUND)}"


def test_docs_show_the_short_list():
    assert doc_blocks.read(deferred_imports.PAGE, deferred_imports.BLOCK) == deferred_imports.table(), (
        "docs/developing.md is behind DEFERRED: python -m onceflow_devkit.deferred_imports writes it again")


SOURCE = textwrap.dedent("""
    import json

    from onceflow.core import faults


    def commit():
        from onceflow.config.settings import ConfigurationError
        import pyarrow.parquet as pq
        from . import sibling

        class Inner:
            def method(self):
                from onceflow.sinks import committed_reader, reprocessing
    """)


def test_the_check_finds_imports_inside_functions_at_any_depth_and_nothing_at_the_top():
    found = function_imports(SOURCE, "onceflow.sinks.example")
    assert [(f.line, f.imported) for f in found] == [
        (8, ("onceflow.config.settings.ConfigurationError",)),
        (9, ("pyarrow.parquet",)),
        (10, ("onceflow.sinks.sibling",)),  # relative: resolved against the module's package
        (14, ("onceflow.sinks.committed_reader", "onceflow.sinks.reprocessing")),
    ]


def test_a_row_allows_only_its_own_modules_and_every_name_of_a_statement():
    found = function_imports(SOURCE, "onceflow.sinks.example")
    rows = (Deferred("onceflow", ("pyarrow",), "heavy"),
            Deferred("onceflow.sinks.example", ("onceflow.sinks.committed_reader",), "a cycle"))
    assert [f.line for f in not_allowed(found, rows)] == [8, 10, 14]  # reprocessing is not on the row
    assert [f.line for f in not_allowed(function_imports(SOURCE, "onceflow.core.other"), rows)] == [8, 10, 14]
    wider = (*rows, Deferred("onceflow.sinks", ("onceflow.sinks", "onceflow.config"), "why"))
    assert not_allowed(found, wider) == []
    assert unused(found, (*wider, Deferred("onceflow", ("boto3",), "unused"))) == [("onceflow", "boto3")]


def test_parsing_the_dag_files_loads_no_heavy_package():
    # What the DAG processor pays to parse a DAG file: the light modules, none of the packages the list defers.
    code = textwrap.dedent("""
        import os, sys, tempfile, runpy
        os.environ["ONCEFLOW_WAREHOUSE"] = "file://" + tempfile.mkdtemp()
        import airflow.sdk  # the DAG processor has it loaded
        for dag in sys.argv[1:]:
            runpy.run_path(dag)
        print(sorted({m.split(".")[0] for m in sys.modules} & {"pyiceberg", "pyspark", "pyarrow", "confluent_kafka",
                                                            "kafka", "boto3", "botocore"}))
        """)
    dags = sorted(str(dag) for dag in (ROOT / "dags").glob("*.py"))
    result = subprocess.run([sys.executable, "-c", code, *dags], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]", f"parsing {dags} loads {result.stdout.strip()}"
