"""Sink kinds: the registry of what each kind of output does at each step of a batch.

A kind is one object implementing ``onceflow.sinks.api.SinkKind`` (the
contract, all of it in that module); a ``SinkSpec`` names it by its string.
``sink_kind`` looks the string up here, or in the ``onceflow.sinks`` entry
point group of another package, and imports the module on first use (DAG
parsing imports no sink's client library). Nothing else in onceflow branches
on a sink's kind: a new kind is a package of its own, or one new folder here and
one line below.
"""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Mapping

from onceflow.config.settings import ConfigurationError
# The contract's names, where the built-in kinds and older code import them from.
from onceflow.sinks.api import (  # noqa: F401
    COMMITTED_PARQUET, AuditScope, CommittedOutput, OpenTransaction, SinkKind, committed_parquet, missing_members,
)
from onceflow.core.planning.intervals import ReprocessRefused

if TYPE_CHECKING:
    from onceflow.core.participant import Vote
    from onceflow.pipeline.spec import PipelineSpec

ENTRY_POINT_GROUP = "onceflow.sinks"
BUILT_IN: dict[str, str] = {
    "files": "onceflow.sinks.files.kind:FILES",
    "kafka": "onceflow.sinks.kafka.kind:KAFKA",
    "iceberg": "onceflow.sinks.iceberg.kind:ICEBERG",
}


@functools.cache  # every SinkSpec asks (kinds()); the installed packages do not change under a process
def _table() -> dict[str, str]:
    table = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return {**table, **BUILT_IN}  # a package cannot replace a built-in kind


def kinds() -> tuple[str, ...]:
    return tuple(sorted(_table()))


def unknown_kind(name: str) -> ConfigurationError:
    """The error for a kind no installed package registers: the installed ones, and how a package adds one."""
    return ConfigurationError(
        f"sink kind {name!r} is not installed: the installed kinds are {', '.join(map(repr, kinds()))}. A kind of a "
        f"package of its own is found once that package is installed (pip install) where Airflow and the Spark driver "
        f"run, with an entry point in group {ENTRY_POINT_GROUP!r} naming it (docs/writing-a-sink.md)")


def kind_module(name: str) -> str:
    """The module that defines kind ``name`` (a package of its own is shipped to Spark with it)."""
    return _table()[name].partition(":")[0]


@functools.cache
def sink_kind(name: str) -> SinkKind:
    location = _table().get(name)
    if location is None:
        raise unknown_kind(name)
    module, _, attribute = location.partition(":")
    kind = getattr(importlib.import_module(module), attribute)
    missing = missing_members(kind)
    if missing:
        raise ConfigurationError(f"sink kind {name!r} ({location}) does not define {', '.join(missing)} of the sink "
                                 "contract (onceflow.sinks.api.SinkKind): its package does not fit this onceflow")
    return kind


def reprocessing(spec: PipelineSpec) -> dict[str, str]:
    """What reprocessing a committed interval does to each output
    (``SinkKind.reprocess``); ``ReprocessRefused`` names every output that
    can neither retract its earlier batch nor safely publish it again."""
    how = {s.name: sink_kind(s.kind).reprocess(s) for s in spec.sinks}
    refused = [f"{s.name} ({s.kind}: {s.target})" for s in spec.sinks if how[s.name] is None]
    if refused:
        raise ReprocessRefused(
            f"pipeline {spec.name!r}: a committed interval cannot be reprocessed, because {', '.join(refused)} "
            "cannot take back what the interval's batch published there. Declare SinkSpec(republish=True) on such "
            "an output if its consumers deduplicate by key (the records are then published again), or do not "
            "replace committed intervals. Nothing was read."
        )
    return how


def open_transactions_of(spec: PipelineSpec, votes: Mapping[str, Vote]) -> list[tuple[str, OpenTransaction]]:
    """(output, transaction) for every transaction the votes hold open, output by output."""
    return [
        (name, txn)
        for name, vote in sorted(votes.items())
        for txn in sink_kind(spec.sink(name).kind).open_transactions(spec.sink(name), vote)
    ]
