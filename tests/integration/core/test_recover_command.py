"""``onceflow recover`` against a real broker and a local warehouse: a batch left
undecided by a plan task whose run died is presumed aborted, and a batch whose
commit died after the decision is finished, from the command line."""

from __future__ import annotations

import json

import pytest

from onceflow.core import faults
from onceflow.ops.cli import main
from onceflow.config.deployment import Deployment
from onceflow.pipeline.runtime import PipelineRuntime
from onceflow.pipeline.spec import FILES, PipelineSpec, SinkSpec
from tests.integration.kafka.helpers import create_topic

SPEC: PipelineSpec  # set by the test: the command finds the pipeline here, as --spec says


def test_recover_presumes_an_undecided_batch_aborted_and_finishes_a_decided_one(kafka_env, tmp_path, capsys):
    global SPEC
    config = kafka_env.config()
    topic = create_topic(config, partitions=1, prefix="recover")
    SPEC = PipelineSpec("recovered", (topic,), "m:f", (SinkSpec("out", FILES, "out"),))
    warehouse = f"file://{tmp_path}/warehouse"
    runtime = PipelineRuntime(SPEC, Deployment.from_environment(warehouse))
    with runtime.offset_source() as source:
        plan = runtime.coordinator.plan_next(source, runtime.plan_config(), run_id="scheduled__dead")
    command = ["recover", "--pipeline", "recovered", "--spec", f"{__name__}:SPEC", "--warehouse", warehouse, "--json"]

    assert main(command) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["batch_seq"], row["state"], row["decision"]) == (plan.batch_seq, "aborted", "ABORT")
    assert "presumed abort by recovery" in row["reason"]

    with runtime.offset_source() as source:
        second = runtime.coordinator.plan_next(source, runtime.plan_config(), run_id="scheduled__next")
    attempt = runtime.coordinator.begin_attempt(second.batch_seq)
    vote = runtime.coordinator.participants["out"].vote_for(second.batch_seq, attempt, [])
    runtime.coordinator.record_vote(second.batch_seq, attempt, vote)
    faults.arm("commit.effect.before", "raise")
    try:
        with pytest.raises(faults.InjectedFault):
            runtime.coordinator.commit(second.batch_seq)
    finally:
        faults.disarm()
    assert main([*command, "--batch", str(second.batch_seq)]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "committed"
