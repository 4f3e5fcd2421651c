"""The imports the library makes inside a function instead of at the top of its module, each with why.

Every other import of ``src/onceflow`` sits at the top of its module. A function-level import is
kept for one of two reasons: a heavy package a process must not load when it does not use it (the
DAG processor parses DAG files with every sink kind loaded; Airflow tasks fork from the scheduler;
``onceflow status`` runs no Spark), or a module of the library that imports such a package at its
top and is reached from a module those processes load. ``tests/unit/test_deferred_imports.py``
fails on a function-level import that no row allows and on a row that allows none;
docs/developing.md shows the rows (``python -m onceflow_devkit.deferred_imports`` writes them).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from onceflow_devkit import doc_blocks

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "src" / "onceflow"
PAGE = ROOT / "docs" / "developing.md"
BLOCK = "deferred-imports"


@dataclass(frozen=True)
class Deferred:
    """Modules under ``where`` may import modules under any of ``what`` inside a function, because ``why``."""

    where: str
    what: tuple[str, ...]
    why: str


DEFERRED = (
    # Heavy packages, wherever the library names them.
    Deferred("onceflow", ("pyiceberg",),
             "the `iceberg` extra: installed only where a pipeline writes tables, while every process loads "
             "the Iceberg kind with the others"),
    Deferred("onceflow", ("pyspark",),
             "runs in the Spark driver and executors; the DAG processor, the Airflow tasks (forked from the "
             "scheduler: Spark Connect's gRPC client is not fork-safe) and `onceflow status` load modules "
             "that name it and run no Spark"),
    Deferred("onceflow", ("pyarrow",),
             "about 250 ms to import; only the readers and writers of data need it, not the DAG processor"),
    Deferred("onceflow", ("confluent_kafka", "kafka"),
             "the Kafka clients (about 130 ms, its admin 60 ms more; kafka-python 180 ms): not loaded to "
             "parse a DAG file"),
    Deferred("onceflow", ("boto3", "botocore"),
             "about 250 ms; only S3 storage uses them, while the settings that name S3 are loaded everywhere"),
    Deferred("onceflow.testing", ("airflow",),
             "the conformance kit checks an output's Asset URI with Airflow; a kind's other tests run without it"),
    # Modules of the library that import those packages at their top, reached from light modules.
    Deferred("onceflow.sinks.kafka.kind", ("onceflow.kafka.admin", "onceflow.kafka.offsets", "onceflow.kafka.reader",
                                           "onceflow.sinks.kafka.fencing", "onceflow.sinks.kafka.withheld",
                                           "onceflow.sinks.kafka.participant"),
             "a kind is loaded wherever a spec is read, the DAG processor included; these bring the Kafka "
             "clients and pyarrow, for a check, a commit or the audit"),
    Deferred("onceflow.sinks.files.participant", ("onceflow.sinks.files.staged_writer",),
             "the files kind imports its participant; only the executors' staging writes Parquet (pyarrow)"),
    Deferred("onceflow.pipeline.runtime", ("onceflow.kafka.connection", "onceflow.kafka.offsets",
                                           "onceflow.sources.kafka.offsets_mirror"),
             "the DAG factory reaches the runtime through the operators and the input-lag trigger; the Kafka "
             "client and pyarrow come with a task's first read of the input"),
    Deferred("onceflow.spark.connect", ("onceflow.spark.batch_job",),
             "the Airflow spark task imports Spark Connect's driver side; the batch job brings Spark's data "
             "sources, loaded when the task runs"),
    Deferred("onceflow.ops.cli", ("onceflow.ops.audit.replay", "onceflow.pipeline.quarantine"),
             "a subcommand imports what it runs: `onceflow status` loads neither Spark nor pyarrow"),
    Deferred("onceflow.testing.conformance", ("onceflow.sinks.committed_reader", "onceflow.sources.kafka.data_source"),
             "the kit's Spark half; a kind's tests of the commit side run without Spark"),
    # The UI page, served by the API server alone.
    Deferred("onceflow.airflow.ui.plugin", ("onceflow.airflow.ui.app",),
             "every Airflow process loads the plugins; the page's FastAPI app is the API server's alone"),
    Deferred("onceflow.airflow.ui", ("airflow", "sqlalchemy", "jinja2", "onceflow"),
             "the page's module: Airflow's API server and its database, the templates, the runtime, imported "
             "when the page serves a request"),
)


@dataclass(frozen=True)
class FunctionImport:
    module: str  # the importing module, dotted
    line: int
    imported: tuple[str, ...]  # each name's dotted module path (``from a import b``: ``a.b``, which may be a name in ``a``)
    source: str  # the module named by the statement

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.source}"


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module of a ``from`` import, relative ones included."""
    if not node.level:
        return node.module or ""
    package = module.split(".")[: -node.level]
    return ".".join([*package, *([node.module] if node.module else [])])


def function_imports(source: str, module: str) -> list[FunctionImport]:
    """The import statements of ``source`` that sit inside a function (at any depth)."""
    found: list[FunctionImport] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(FunctionImport(module, child.lineno, (alias.name,), alias.name))
            elif in_function and isinstance(child, ast.ImportFrom):
                base = _resolve(module, child)
                found.append(FunctionImport(module, child.lineno, tuple(f"{base}.{a.name}" for a in child.names), base))
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(source), False)
    return found


def library_function_imports(root: Path = LIBRARY) -> list[FunctionImport]:
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.extend(function_imports(path.read_text(), module))
    return found


def allowing(found: FunctionImport, rows=DEFERRED) -> Deferred | None:
    """The row that allows this import: its module under ``where``, each name under one of ``what``
    (``from a import b`` counts as under ``a`` or ``a.b``)."""
    for row in rows:
        if _under(found.module, row.where) and all(
                any(_under(name, what) or _under(found.source, what) for what in row.what) for name in found.imported):
            return row
    return None


def not_allowed(found: list[FunctionImport], rows=DEFERRED) -> list[FunctionImport]:
    return [f for f in found if allowing(f, rows) is None]


def unused(found: list[FunctionImport], rows=DEFERRED) -> list[tuple[str, str]]:
    """The (where, what) pairs that allow no import of ``found``: a row that outlived its reason."""
    used = {(row.where, what) for f in found for row in rows if _under(f.module, row.where)
            for what in row.what for name in f.imported if _under(name, what) or _under(f.source, what)}
    return [(row.where, what) for row in rows for what in row.what if (row.where, what) not in used]


def table(rows=DEFERRED) -> str:
    """The rows as docs/developing.md shows them."""
    lines = ["| in | imported inside a function | why |", "| --- | --- | --- |"]
    for row in rows:
        where = "anywhere" if row.where == "onceflow" else f"`{row.where}`"
        lines.append(f"| {where} | {', '.join(f'`{w}`' for w in row.what)} | {row.why} |")
    return "\n".join(lines)


if __name__ == "__main__":
    doc_blocks.write(PAGE, BLOCK, table())
    print(f"wrote {BLOCK} in {PAGE.relative_to(ROOT)}")
