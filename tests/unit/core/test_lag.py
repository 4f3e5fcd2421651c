"""The input lag, computed from what its interface names alone: a pipeline's topics, its ledger and its input log."""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from typing import Protocol

import pytest

from onceflow.config.deployment import Deployment
from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.core.lag import LagRuntime, LagSource, PipelineInput, input_lag
from onceflow.core.ledger.storage import open_ledger_storage
from onceflow.kafka.offsets import KafkaOffsetSource
from onceflow.pipeline.runtime import PipelineRuntime
from onceflow.pipeline.spec import PipelineSpec
from tests.doubles.fakes import FakeSource
from tests.doubles.helpers import run_batch, world_coordinator
from tests.doubles.specs import ORDERS


class StampedSource(FakeSource):
    """The fake input log with the record timestamps the lag asks for (1000 + 10 * offset, as FakeSource says)."""

    def timestamps_at(self, offsets):
        return {tp: 1000 + 10 * offset if offset < self.logs[tp][1] else None for tp, offset in offsets.items()}


class Topics:
    topics = ("in",)


class OnlyWhatTheLagNeeds:
    """A runtime with the members of LagRuntime and nothing else: a use of any other fails."""

    def __init__(self, reader, log: StampedSource):
        self.spec, self.reader, self._log, self.opened = Topics(), reader, log, []

    @contextmanager
    def offset_source(self, timeout_s: float = 30.0):
        self.opened.append(timeout_s)
        yield self._log
        self.opened.append("closed")


@pytest.fixture
def coordinator(tmp_path):
    coord, _, parts = world_coordinator(open_ledger_storage(str(tmp_path / "ledger")))
    return coord, parts


def test_each_partition_lags_from_the_newest_committed_batch_to_its_last_stable_offset(coordinator):
    coord, parts = coordinator
    log = StampedSource()
    for partition, end in enumerate((250, 40)):
        log.add("in", partition, end)
    run_batch(coord, parts, log)  # at most 100 records a partition: [0, 100) and [0, 40)
    rows = input_lag(OnlyWhatTheLagNeeds(coord, log), now=5000, source=log)
    assert rows == [
        {"topic": "in", "partition": 0, "committed_end": 100, "last_stable": 250, "lag": 150,
         "oldest_uncommitted_age_s": 3.0},  # the record at offset 100 has the timestamp 2000
        {"topic": "in", "partition": 1, "committed_end": 40, "last_stable": 40, "lag": 0,
         "oldest_uncommitted_age_s": None},
    ]


def test_before_any_batch_a_partition_lags_from_its_earliest_offset(coordinator):
    coord, _ = coordinator
    log = StampedSource()
    log.add("in", 0, 30, earliest=10)
    [row] = input_lag(OnlyWhatTheLagNeeds(coord, log), now=2000, source=log)
    assert (row["committed_end"], row["lag"], row["oldest_uncommitted_age_s"]) == (10, 20, 0.9)


def test_without_a_source_the_lag_opens_one_for_the_call_and_closes_it(coordinator):
    coord, _ = coordinator
    log = StampedSource()
    log.add("in", 0, 0)
    runtime = OnlyWhatTheLagNeeds(coord, log)
    assert input_lag(runtime, now=0, timeout_s=4.0)[0]["lag"] == 0
    assert runtime.opened == [4.0, "closed"]


def _members(protocol: type) -> dict[str, object]:
    return {name: value for name, value in vars(protocol).items() if not name.startswith("_")}


def _lacks_the_members_of(protocol: type, cls: type) -> list[str]:
    """The members of ``protocol`` that ``cls`` lacks (neither its attribute nor set from its constructor's
    parameter of that name), or has with other parameters."""
    wrong = []
    for name, member in _members(protocol).items():
        if name in inspect.signature(cls.__init__).parameters:
            continue
        if not hasattr(cls, name):
            wrong.append(f"{name}: missing")
        elif callable(member) and list(inspect.signature(member).parameters) != list(
                inspect.signature(getattr(cls, name)).parameters):
            wrong.append(f"{name}: parameters {inspect.signature(getattr(cls, name))}")
    return wrong


@pytest.mark.parametrize("protocol, concrete", [
    (LagRuntime, PipelineRuntime),
    (LagSource, KafkaOffsetSource),
    (PipelineInput, PipelineSpec),
], ids=["PipelineRuntime is a LagRuntime", "KafkaOffsetSource is a LagSource", "PipelineSpec is a PipelineInput"])
def test_what_the_callers_pass_has_every_member_of_the_interface(protocol: type[Protocol], concrete):
    assert _lacks_the_members_of(protocol, concrete) == []


def test_a_pipeline_runtime_keeps_the_spec_it_is_given_as_its_spec():
    runtime = PipelineRuntime(ORDERS, Deployment("file:///w", KafkaCluster("b:9092")))
    assert runtime.spec.topics == ("orders",)
