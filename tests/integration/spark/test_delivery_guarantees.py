"""Each delivery guarantee on a real broker and real Spark, through an abort, its replay and a
retried attempt, judged by the replay audit of the real outputs.

The clickstream writes its enriched clicks ``at_least_once`` and its dead letters with
guarantee ``none``; the page counts stay ``exactly_once``. Batch 1 writes, then is aborted
(a failed commit, say); batch 2 replays it and runs two attempts before its commit.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter

import pytest

from onceflow.ops.audit.replay import replay_audit
from onceflow.kafka.admin import ensure_topics
from onceflow.sinks.kafka.headers import batch_and_split
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow.spark.batch_job import run_batch
from onceflow_devkit.services.kafka_broker import HIDES_ABORTED_RECORDS
from tests.integration.kafka.helpers import read_committed
from tests.integration.spark.test_batch_job import produce, unique_clickstream
from tests.support import require


@pytest.fixture
def runtime(kafka_broker, tmp_path) -> PipelineRuntime:
    # On a broker that shows aborted records, the audit keeps only the voted offsets: copies are set aside.
    require(kafka_broker, HIDES_ABORTED_RECORDS)
    tag = uuid.uuid4().hex[:8]
    spec = unique_clickstream(tag)
    weaker = {"clicks_enriched": "at_least_once", "clicks_dead_letter": "none"}
    spec = dataclasses.replace(spec, sinks=tuple(
        dataclasses.replace(s, guarantee=weaker.get(s.name, s.guarantee)) for s in spec.sinks))
    ensure_topics(kafka_broker.config(), [spec.topics[0], *(s.target for s in spec.sinks if s.kind == "kafka")])
    return PipelineRuntime(spec, Deployment(f"file://{tmp_path}/warehouse", kafka_broker))


def batches_in(broker, topic: str) -> Counter:
    """How many records a read_committed consumer sees under each batch id."""
    return Counter(batch_and_split(headers)[0] for _, _, headers in read_committed(broker.config(), topic, 2))


def test_at_least_once_writes_again_on_replay_and_retry_none_never_and_the_audit_holds_each_to_its_promise(
        spark, runtime, kafka_broker):
    produce(kafka_broker, runtime.spec.topics[0], 300, seed=7)
    coordinator = runtime.coordinator
    enriched, dead = (runtime.spec.sink(name).target for name in ("clicks_enriched", "clicks_dead_letter"))

    with runtime.offset_source() as source:
        first = coordinator.plan_next(source, runtime.plan_config(), run_id="run-1")
    run_batch(spark, runtime, first.batch_seq)
    # Visible as soon as the job flushed, before any commit: no transaction holds them.
    written = batches_in(kafka_broker, enriched)[first.batch_id], batches_in(kafka_broker, dead)[first.batch_id]
    assert all(written), written
    assert coordinator.rollback(first.batch_seq, "the commit failed").state.value == "aborted"

    with runtime.offset_source() as source:
        second = coordinator.plan_next(source, runtime.plan_config(), run_id="run-2")
    assert second.replay_of == first.batch_seq and second.records == first.records
    run_batch(spark, runtime, second.batch_seq)  # attempt 1, then a retry of the whole job
    run_batch(spark, runtime, second.batch_seq)
    assert coordinator.commit(second.batch_seq).state.value == "committed"
    runtime.after_commit(second)

    # at_least_once: the aborted batch's copy stays, and both attempts of the replay wrote theirs.
    assert batches_in(kafka_broker, enriched) == {first.batch_id: written[0], second.batch_id: 2 * written[0]}
    # none: only batch 1's first attempt ever wrote; the replay and its retry wrote nothing.
    assert batches_in(kafka_broker, dead) == {first.batch_id: written[1]}
    votes = [v for v in coordinator.votes_of_all_attempts(second.batch_seq) if v.participant == "clicks_dead_letter"]
    assert [(v.attempt, v.payload) for v in votes] == [
        (1, {"not_written": f"this batch replays batch {first.batch_id}, aborted, whose job may have written them"}),
        (2, {"not_written": "attempt 1 of this batch may have written them"})]

    report = replay_audit(spark, runtime)
    assert report.ok, report.summary()
    outputs = report.outputs
    assert (outputs["clicks_enriched"].total("duplicates"), outputs["clicks_enriched"].total("not_committed"),
            outputs["clicks_enriched"].total("missing")) == (written[0], written[0], 0), report.summary()
    assert (outputs["clicks_dead_letter"].total("missing"), outputs["clicks_dead_letter"].total("not_committed"),
            outputs["clicks_dead_letter"].total("duplicates")) == (written[1], written[1], 0), report.summary()
    counts = outputs["page_minute_counts"]
    assert counts.guarantee == "exactly_once" and counts.total("found") == counts.total("expected") > 0
    assert "at_least_once: duplicates counted, not failed" in report.summary()

