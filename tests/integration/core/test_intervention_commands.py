"""``onceflow split`` and ``onceflow skip`` against a real broker and an S3 warehouse over HTTP:
a batch that keeps failing is split, then skipped; the skipped records are in the quarantine,
byte for byte, the next batch starts after them, status and the audit's range check account
for them, and every refusal exits 2 saying why. Then every command fuzzed with what a person
could type: each answers with a message, and no committed batch changes."""

from __future__ import annotations

import functools
import io
import json

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from confluent_kafka import Producer

from onceflow.core import faults
from onceflow.ops.audit.ranges import accounted_plans, contiguity_errors
from onceflow.ops.cli import main
from onceflow.config.deployment import Deployment
from onceflow.config.warehouse_layout import quarantine_dir
from onceflow.pipeline.quarantine import skip_batch
from onceflow.pipeline.runtime import PipelineRuntime
from onceflow.pipeline.spec import FILES, PipelineSpec, SinkSpec
from onceflow.core.planning.run_inputs import RunInputs
from tests.integration.kafka.helpers import create_topic

SPEC: PipelineSpec  # set by the test: the commands find the pipeline here, as --spec says


def produce(config, topic: str, n: int) -> dict[tuple[int, int], tuple]:
    """``n`` records over partitions 0 and 1, some keyless, some with headers: (partition, offset) -> record."""
    written: dict[tuple[int, int], tuple] = {}
    producer = Producer(dict(config))

    def delivered(headers, err, msg):  # a delivery report carries no headers: the produced ones are passed along
        assert err is None, err
        written[(msg.partition(), msg.offset())] = (msg.key(), msg.value(), headers)

    for i in range(n):
        headers = [("h", f"{i}".encode())] if i % 2 else []
        producer.produce(topic, value=f"v{i}".encode(), key=None if i % 3 else f"k{i}".encode(), partition=i % 2,
                         headers=headers or None, on_delivery=functools.partial(delivered, headers))
    producer.flush(30)
    assert len(written) == n
    return written


def test_a_failing_batch_is_split_then_skipped_into_the_quarantine_and_the_pipeline_goes_on(
        kafka_env, s3_endpoint, s3_bucket, monkeypatch, capsys):
    global SPEC
    config = kafka_env.config()
    topic = create_topic(config, partitions=2, prefix="poison")
    SPEC = PipelineSpec("poisoned", (topic,), "m:f", (SinkSpec("out", FILES, "out"),))
    warehouse = f"s3://{s3_bucket}/wh"
    monkeypatch.setenv("ONCEFLOW_S3_ENDPOINT", s3_endpoint.endpoint_url)
    for name, value in s3_endpoint.credentials_env().items():
        monkeypatch.setenv(name, value)
    written = produce(config, topic, 30)
    runtime = PipelineRuntime(SPEC, Deployment.from_environment(warehouse))
    coordinator = runtime.coordinator
    options = ["--pipeline", "poisoned", "--spec", f"{__name__}:SPEC", "--warehouse", warehouse, "--json"]

    def run(*command: str) -> tuple[int, str, str]:
        code = main([*command, *options])
        out, err = capsys.readouterr()
        return code, out, err

    def plan(run_id: str, **params):
        with runtime.offset_source() as source:
            return coordinator.plan_next(source, runtime.plan_config(RunInputs(**params)), run_id=run_id)

    def commit(plan) -> None:  # what the spark task and the commit task do, for an output of no rows
        attempt = coordinator.begin_attempt(plan.batch_seq)
        coordinator.record_vote(plan.batch_seq, attempt, coordinator.participants["out"].vote_for(plan.batch_seq, attempt, []))
        coordinator.commit(plan.batch_seq)

    def plan_and_fail(run_id: str):
        planned = plan(run_id)
        coordinator.recover()  # its run died: presumed aborted
        return planned

    commit(plan("run-0", max_records_per_partition=5))  # batch 1: offsets 0..4 of each partition
    failing = plan_and_fail("run-1")
    assert [(r.start, r.end) for r in failing.ranges] == [(5, 15), (5, 15)]

    code, out, _ = run("split", "--records", "4", "--reason", "the transform dies on one record", "--by", "ana")
    assert code == 0
    row = json.loads(out)
    assert (row["batch_seq"], row["state"], row["intervention"]["action"], row["intervention"]["by"]) == (2, "aborted", "split", "ana")
    split = plan_and_fail("run-2")
    assert [(r.start, r.end) for r in split.ranges] == [(5, 9), (5, 9)] and split.replay_of == 2
    assert "split to at most 4 records per partition by ana" in split.intervention

    # Who and why are words: a blank one is refused before any record is read or copied (the conf fuzz
    # below met `skip --reason ''` escaping as a traceback after the copy).
    for blank in (["--reason", " "], ["--reason", "late", "--by", ""]):
        with pytest.raises(SystemExit) as refused:
            main(["skip", *blank, *options])
        assert refused.value.code == 2 and "is blank: the ledger records who decided and why" in capsys.readouterr().err
    with pytest.raises(ValueError, match="names who made it and why"):
        skip_batch(runtime, 3, "ana", "")
    assert runtime.storage.list_tree(quarantine_dir(warehouse, "poisoned", "0000000003")) == []

    # An interrupted skip (before its record is written) changes nothing; run again, it reuses the copy.
    faults.arm("ledger.intervention.before_write", "raise")
    try:
        with pytest.raises(faults.InjectedFault):
            skip_batch(runtime, 3, "ana", "still dies")
    finally:
        faults.disarm()
    assert coordinator.describe(3).intervention is None
    code, out, _ = run("skip", "--reason", "still dies: record v6 is poison")
    assert code == 0
    skipped = json.loads(out)["intervention"]
    assert skipped["action"] == "skip" and skipped["reason"] == "still dies: record v6 is poison"
    assert [q["records"] for q in skipped["quarantine"]] == [4, 4]

    # The quarantine holds exactly the skipped records, key, value and headers as produced.
    quarantined = {}
    for q in skipped["quarantine"]:
        assert q["path"].startswith(f"{warehouse}/_onceflow/poisoned/quarantine/0000000003/{topic}/")
        table = pq.read_table(io.BytesIO(runtime.storage.read_bytes(q["path"])))
        for r in table.to_pylist():
            assert r["topic"] == topic
            quarantined[(r["partition"], r["offset"])] = (r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"] or []])
    assert quarantined == {k: v for k, v in written.items() if 5 <= k[1] < 9}

    after = plan("run-3")
    assert [(r.start, r.end) for r in after.ranges] == [(9, 15), (9, 15)] and after.replay_of is None
    commit(after)

    code, out, _ = run("status")
    rows = {r["batch_seq"]: r for r in json.loads(out)}
    assert rows[4]["state"] == "committed" and "skipped, 8 records quarantined by" in rows[4]["follows_intervention"]
    assert rows[3]["intervention"]["action"] == "skip" and rows[2]["intervention"]["action"] == "split"
    # Every input offset is committed or quarantined: the audit's range check knows skipped batches.
    committed, skipped_plans = accounted_plans(coordinator)
    assert [p.batch_seq for p in skipped_plans] == [3]
    assert contiguity_errors(sorted([p for p, _ in committed] + skipped_plans, key=lambda p: p.batch_seq)) == []
    assert contiguity_errors([p for p, _ in committed]) != [], "without the skipped batch the range check sees a gap"

    # Refusals name why and change nothing.
    code, _, err = run("skip", "--reason", "again")
    assert code == 2 and "is committed, not aborted: a committed batch is never changed" in err
    code, _, err = run("split", "--batch", "3", "--records", "1", "--reason", "late")
    assert code == 2 and "not the latest batch" in err
    plan("run-4")
    code, _, err = run("skip", "--reason", "too early")
    assert code == 2 and "is planned, not aborted: finish it first with `onceflow recover`" in err


# Values a person could type, or paste by mistake: numbers out of range, words, unicode, huge.
_typed = st.one_of(st.integers(-10, 10**20).map(str), st.text(max_size=40), st.text(min_size=2000, max_size=3000),
                   st.sampled_from(["0", "-1", "1e3", "3-7,9", "7-3", "²", "", " ", "1,,2", "abc-def"]))
_options = {"split": ["--batch", "--records", "--reason", "--by"], "skip": ["--batch", "--reason", "--by"],
            "recover": ["--batch"], "status": ["--limit"], "audit": ["--batches", "--sample"]}


@st.composite
def _command(draw):
    name = draw(st.sampled_from(sorted(_options)))
    chosen = draw(st.lists(st.sampled_from(_options[name]), unique=True))
    argv = [name, *[part for option in chosen for part in (option, draw(_typed))]]
    if name == "audit":  # only arguments refused before a Spark session starts (a valid audit is tested elsewhere)
        argv += ["--batches", draw(st.sampled_from(["x", "3-", "1,b"])), "--sample", draw(_typed)]
    return argv


def test_any_arguments_to_the_commands_are_answered_and_leave_every_committed_batch_intact(
        kafka_env, tmp_path, capsys):
    global SPEC
    topic = create_topic(kafka_env.config(), partitions=2, prefix="fuzz")
    SPEC = PipelineSpec("fuzzed", (topic,), "m:f", (SinkSpec("out", FILES, "out"),))
    produce(kafka_env.config(), topic, 20)
    runtime = PipelineRuntime(SPEC, Deployment.from_environment(f"file://{tmp_path}/wh"))
    coordinator = runtime.coordinator
    with runtime.offset_source() as source:
        first = coordinator.plan_next(source, runtime.plan_config(RunInputs(max_records_per_partition=5)), run_id="r1")
    attempt = coordinator.begin_attempt(first.batch_seq)
    coordinator.record_vote(first.batch_seq, attempt, coordinator.participants["out"].vote_for(first.batch_seq, attempt, []))
    coordinator.commit(first.batch_seq)
    with runtime.offset_source() as source:
        coordinator.plan_next(source, runtime.plan_config(), run_id="r2")
    coordinator.recover()  # batch 2 aborted: what split and skip act on
    options = ["--pipeline", "fuzzed", "--spec", f"{__name__}:SPEC", "--warehouse", f"file://{tmp_path}/wh"]

    @settings(max_examples=60, deadline=None, database=None)
    @given(argv=_command())
    def answered(argv):
        try:
            code = main([*argv, *options])
        except SystemExit as exit_:  # argparse: a malformed argument, named on stderr
            code = exit_.code
        out, err = capsys.readouterr()
        assert code in (0, 1, 2), (argv, code)
        if code == 2:
            assert err.startswith("onceflow: ") or "error: argument" in err or "required" in err, (argv, err)
        assert coordinator.describe(first.batch_seq).state.value == "committed"
        assert main(["status", *options]) == 0
        capsys.readouterr()

    answered()
    with runtime.offset_source() as source:  # the pipeline plans its next batch
        assert coordinator.plan_next(source, runtime.plan_config(), run_id="r3").batch_seq > 2
