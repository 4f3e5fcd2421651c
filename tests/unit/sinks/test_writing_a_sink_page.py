"""docs/writing-a-sink.md is enough to write a kind: its blocks of signatures and of job options are the
code's own (onceflow.sinks.api, onceflow.testing.conformance), compared here; a change to either shows."""

from __future__ import annotations

import inspect

import pytest

from onceflow.sinks.api import JOB_OPTIONS, REQUIRED, SinkKind
from onceflow.sinks.data_source_base import PreCommitSource, PreCommitWriter, StagedSplit, TaskAttempt
from onceflow.testing.conformance import Held, SinkHarness
from onceflow_devkit import doc_blocks
from onceflow_sqlite_sink import data_source as sqlite_data_source
from tests.integration.examples.test_sqlite_sink import SqliteHarness
from tests.support import ROOT

PAGE = ROOT / "docs" / "writing-a-sink.md"


def signature(function) -> str:
    """``(name: annotation = default, ...) -> annotation`` as the source spells it."""
    sig = inspect.signature(function)
    params = []
    for p in sig.parameters.values():
        text = p.name if p.annotation is p.empty else f"{p.name}: {p.annotation}"
        params.append(text if p.default is p.empty else f"{text} = {p.default!r}")
    returns = "" if sig.return_annotation is sig.empty else f" -> {sig.return_annotation}"
    return f"({', '.join(params)}){returns}"


_NO_VALUE = object()


def member(cls, name: str) -> str:
    value = getattr(cls, name, _NO_VALUE)
    if callable(value):
        return f"    def {name}{signature(value)}"
    default = "" if value is _NO_VALUE else f" = {value!r}"
    return f"    {name}: {cls.__annotations__[name]}{default}"


def members(cls, names) -> list[str]:
    return [member(cls, name) for name in names]


def python(lines: list[str]) -> str:
    return "\n".join(["```python", *lines, "```"])


BLOCKS = {
    "sink-kind-members": lambda: python(["class SinkKind:  # onceflow.sinks.api: subclass it", *members(SinkKind, REQUIRED)]),
    "job-options": lambda: "\n".join(["| key | what |", "|---|---|",
                                      *(f"| `{key}` | {what} |" for key, what in JOB_OPTIONS.items())]),
    "sink-harness": lambda: python([
        "class SinkHarness(Protocol):  # onceflow.testing.conformance",
        *members(SinkHarness, ["pipeline", "sink", "pre_commit", "visible", "held", "participant", "aged", "job_failed"]),
        "", "@dataclass(frozen=True)", "class Held:  # what held() returns, one per thing held",
        *members(Held, ["what", "ends_within"])]),
    "sqlite-harness": lambda: python(inspect.getsource(SqliteHarness).splitlines()),
    "data-source-base": lambda: python([
        "class PreCommitSource(DataSource):  # onceflow.sinks.data_source_base: subclass it",
        *members(PreCommitSource, ["format", "writes", "required", "writer_type"]),
        "", "class PreCommitWriter(DataSourceArrowWriter, Generic[Message]):  # subclass it",
        *members(PreCommitWriter, ["stage", "vote", "discard"]),
        "", "@dataclass(frozen=True)", "class TaskAttempt:  # what stage() is told of its task",
        *members(TaskAttempt, ["split", "task_attempt"]),
        "", "@dataclass(frozen=True)", "class StagedSplit(WriterCommitMessage):  # a message, for a kind that votes dicts",
        *members(StagedSplit, ["staged"])]),
    "sqlite-data-source": lambda: python(inspect.getsource(sqlite_data_source).strip("\n").splitlines()),
}


@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_the_pages_block_is_the_codes_own(block):
    assert doc_blocks.read(PAGE, block) == BLOCKS[block](), (
        f"docs/writing-a-sink.md's block {block!r} no longer says what the code does: write it again with "
        f"doc_blocks.write(PAGE, {block!r}, BLOCKS[{block!r}]()) from this module, then reread the text around it")
