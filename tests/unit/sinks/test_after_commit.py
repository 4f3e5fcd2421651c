"""The step after a commit: every participant's, whatever one of them does."""

from __future__ import annotations

import logging

from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.core.participant import Participant
from onceflow.core.plan import Plan
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow.pipeline.spec import FILES, PipelineSpec, SinkSpec


class Cleaner(Participant):
    def __init__(self, name, fails=False):
        self.name, self.fails, self.cleaned = name, fails, []

    def after_commit(self, plan):
        if self.fails:
            raise RuntimeError("server down")
        self.cleaned.append(plan.batch_seq)


def test_a_failing_step_after_the_commit_is_logged_and_the_other_outputs_still_take_theirs(monkeypatch, caplog):
    spec = PipelineSpec("p", ("t",), "m:f", (SinkSpec("a", FILES, "a"), SinkSpec("b", FILES, "b")))
    runtime = PipelineRuntime(spec, Deployment("file:///w", KafkaCluster("127.0.0.1:1")))
    failing, cleaner = Cleaner("a", fails=True), Cleaner("b")
    runtime.__dict__["coordinator"] = type("Coordinator", (), {"participants": {"a": failing, "b": cleaner}})()
    monkeypatch.setattr(runtime, "mirror_offsets", lambda plan: None)
    with caplog.at_level(logging.WARNING):
        runtime.after_commit(Plan("p", 7, ()))  # the commit task goes on to announce the batch
    assert cleaner.cleaned == [7]
    assert "batch 0000000007 of p is committed, but a's step after the commit failed: server down" in caplog.text
