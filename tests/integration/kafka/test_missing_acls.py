"""Each required row of the ACL table, removed in turn on the secured Apache Kafka: the step that needs it
fails at once with a message naming the principal, the operation and the resource; nothing is lost or
written twice; and once the grant is back, the next run goes on.

A run here is what an Airflow run does, in this process and without Spark: the plan task, the Spark
side (the range reader and the split writers its executors run, the vote its data source records), the
commit task with the offsets mirror, or the rollback task when the Spark side failed. The real Spark job
on the same broker and grants is ``tests/integration/spark/test_secured_batch.py``'s.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition

from onceflow.core import faults
from onceflow.core.participant import Vote
from onceflow.core.states import BatchState
from onceflow.kafka.acls import ACLS, AIRFLOW, SPARK, Of, grants
from onceflow.kafka.admin import ensure_topics
from onceflow.kafka.reader import read_range
from onceflow.kafka.refusals import NotAuthorized
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow.pipeline.spec import KAFKA, PipelineSpec, SinkSpec
from onceflow.sinks.kafka.fencing import fence_transactional_ids
from onceflow.sinks.kafka.handle import vote_payload
from onceflow.sinks.kafka.writer import TransactionalSplitWriter
from onceflow.sinks.kafka.staged import staged_uri
from onceflow_devkit.services.kafka_security import apply_grants
from tests.integration.kafka.helpers import read_committed

REQUIRED = [acl for acl in ACLS if acl.required]
# What "at once" means: a refusal comes back within one request; the timeouts these steps would
# otherwise wait out are 30 s and more.
FAST_S = 10.0
# The row a normal batch never uses: re-publishing a split the broker aborted (the repair).
REPAIR_ROW = next(a for a in REQUIRED if a.principal is AIRFLOW and a.operation == "Write" and a.of is Of.OUTPUT_TOPICS)
RECORDS = 40


@dataclass
class Pipeline:
    """One pipeline on the secured broker, seen by each principal (and the admin, for the checks)."""

    spec: PipelineSpec
    airflow: PipelineRuntime
    spark_side: PipelineRuntime
    admin: PipelineRuntime

    @property
    def output(self) -> str:
        return self.spec.sinks[0].target

    def plan(self, run_id: str):
        """The plan task: recovery of the previous batch, its aftermath, then the next plan."""
        runtime = self.airflow
        runtime.check_kafka()
        with runtime.offset_source() as source:
            plan = runtime.coordinator.plan_next(source, runtime.plan_config(), run_id=run_id)
        previous = runtime.coordinator.describe(plan.batch_seq - 1) if plan.batch_seq > 1 else None
        if previous is not None and previous.state is BatchState.COMMITTED:
            runtime.after_commit(previous.plan)
        return plan

    def spark_job(self, seq: int) -> None:
        """The Spark side of one attempt, as its driver and executors run it: claim the attempt, fence an
        earlier attempt's ids, read the planned ranges, write each split in a transaction left open, vote."""
        runtime, config = self.spark_side, self.spark_side.deployment.kafka.config()
        runtime.check_kafka()
        plan = runtime.coordinator.plan(seq)
        attempt = runtime.coordinator.begin_attempt(seq)
        sink = self.spec.sinks[0]
        ids = plan.sink(sink.name).transactional_ids
        if attempt > 1:
            fence_transactional_ids(config, ids)
        values = [v for r in plan.ranges for b in read_range(config, r) for v in b.column("value").to_pylist()]
        handles = []
        for split in range(sink.splits):
            writer = TransactionalSplitWriter(config, self.spec.name, sink.name, plan.batch_id, split, sink.target,
                                              staged_uri(runtime.deployment.warehouse, self.spec.name, sink.name,
                                                         plan.batch_id, split, attempt))
            writer.begin()
            writer.write_batch(pa.RecordBatch.from_pydict({"value": pa.array(values[split::sink.splits], pa.binary())}))
            handles.append(writer.precommit())
        runtime.coordinator.record_vote(seq, attempt, Vote(sink.name, seq, attempt, vote_payload(handles),
                                                           records=len(values)))

    def run(self, run_id: str, broker_aborts_a_split: bool = False) -> None:
        """One Airflow run: plan, the Spark side (the rollback task when it fails), commit, mirror."""
        plan = self.plan(run_id)
        try:
            self.spark_job(plan.batch_seq)
        except Exception:
            self.airflow.coordinator.rollback(plan.batch_seq, reason=f"the spark task of {run_id} failed")
            raise
        if broker_aborts_a_split:  # after COMMIT is decided, as its transaction timeout would: the commit repairs it
            faults.arm("commit.effect.before", "raise")
            try:
                with pytest.raises(faults.InjectedFault):
                    self.airflow.coordinator.commit(plan.batch_seq)
            finally:
                faults.disarm()
            ids = plan.sink(self.spec.sinks[0].name).transactional_ids
            fence_transactional_ids(self.admin.deployment.kafka.config(), ids[:1])
        status = self.airflow.coordinator.commit(plan.batch_seq)
        self.airflow.after_commit(status.plan)

    def produce(self, n: int, start: int) -> list[bytes]:
        from confluent_kafka import Producer

        values = [f"record-{i}".encode() for i in range(start, start + n)]
        producer = Producer(self.admin.deployment.kafka.config())
        for i, value in enumerate(values):
            producer.produce(self.spec.topics[0], value, partition=i % 2)
        assert producer.flush(30) == 0
        return values


def granted_pipeline(secured_kafka, tmp_path, replication: int = 1) -> Pipeline:
    """A pipeline of its own on ``secured_kafka``, its principals granted exactly the required rows."""
    tag = uuid.uuid4().hex[:8]
    spec = PipelineSpec(f"acl-{tag}", (f"acl-in-{tag}",), "m:f", (SinkSpec("out", KAFKA, f"acl-out-{tag}", splits=2),),
                        max_records_per_partition=1000)
    ensure_topics(secured_kafka.broker.config(), [spec.topics[0], spec.sinks[0].target], replication_factor=replication)
    warehouse = f"file://{tmp_path}/warehouse"
    runtime = lambda broker, who: PipelineRuntime(spec, Deployment(warehouse, broker), identity=who)  # noqa: E731
    pipeline = Pipeline(spec, runtime(secured_kafka.as_user(AIRFLOW.default_user), "airflow"),
                        runtime(secured_kafka.as_user(SPARK.default_user), "spark-driver"),
                        runtime(secured_kafka.broker, "admin"))
    apply_grants(secured_kafka.broker.config(), grants(spec.kafka_resources(), required_only=True))
    return pipeline


@pytest.fixture
def pipeline(secured_kafka, tmp_path) -> Pipeline:
    pipeline = granted_pipeline(secured_kafka, tmp_path)
    yield pipeline
    apply_grants(secured_kafka.broker.config(), grants(pipeline.spec.kafka_resources(), required_only=True), revoke=True)


@pytest.mark.parametrize("acl", REQUIRED, ids=[a.key for a in REQUIRED])
def test_a_missing_acl_names_itself_at_once_loses_nothing_and_the_pipeline_goes_on_once_granted(acl, pipeline,
                                                                                                secured_kafka):
    admin = secured_kafka.broker.config()
    missing = grants(pipeline.spec.kafka_resources(), acls=[acl])
    apply_grants(admin, missing, revoke=True)
    produced = pipeline.produce(RECORDS, 0)

    started = time.monotonic()
    with pytest.raises(NotAuthorized) as refused:
        pipeline.run("run-1", broker_aborts_a_split=acl is REPAIR_ROW)
    took = time.monotonic() - started
    said = str(refused.value)
    assert any(f"{g.principal} may not {g.operation} {g.resource.label} {g.name}" in said for g in missing), said
    assert "onceflow acls --pipeline" in said
    assert took < FAST_S, f"the refusal took {took:.1f} s: {said}"

    apply_grants(admin, missing)
    pipeline.run("run-2")  # recovers what run-1 left (finishes its commit, or replays its batch), then goes on

    written = [value for _, value, _ in read_committed(admin, pipeline.output, 2)]
    assert sorted(written) == sorted(produced), "every input record exactly once in the output"
    group = Consumer({**admin, "group.id": pipeline.spec.group_id})
    ends = group.committed([TopicPartition(pipeline.spec.topics[0], p) for p in (0, 1)], timeout=30)
    group.close()
    assert [tp.offset for tp in ends] == [RECORDS // 2] * 2, "the consumer group mirrors the committed ends"


def test_writing_a_dropped_commit_marker_takes_alter_or_cluster_action_on_the_cluster_and_says_so_without(pipeline,
                                                                                                         secured_kafka):
    # The repair of a hanging transaction (WriteTxnMarkers) is the optional row. Kafka takes ALTER on the
    # cluster, or CLUSTER_ACTION: each is tried here on a transaction left open in a partition, its
    # marker written by the Airflow side as a commit of a hanging split would.
    from dataclasses import replace

    from onceflow.sinks.kafka.markers import write_commit_markers

    admin, airflow = secured_kafka.broker.config(), pipeline.airflow.deployment.kafka.config()
    (alter,) = [a for a in ACLS if a.operation == "Alter" and a.of is Of.CLUSTER]
    cluster_action = replace(alter, operation="ClusterAction")
    refused_first = None
    for split, grant in enumerate((alter, cluster_action)):
        writer = TransactionalSplitWriter(admin, pipeline.spec.name, "out", "0000000009", split, pipeline.output,
                                          f"{pipeline.admin.deployment.warehouse}/hanging-{split}.arrow")
        writer.begin()
        writer.write_batch(pa.RecordBatch.from_pydict({"value": [b"held"] * 3, "partition": [split] * 3}))
        handle = writer.precommit()
        marked = write_commit_markers(airflow, pipeline.output, [split], handle.producer_id, handle.epoch)
        refused_first = refused_first or marked[split].refused
        assert not marked[split].written
        granted = grants(pipeline.spec.kafka_resources(), acls=[grant])
        apply_grants(admin, granted)
        try:
            assert write_commit_markers(airflow, pipeline.output, [split], handle.producer_id, handle.epoch)[split].written
        finally:
            apply_grants(admin, granted, revoke=True)
    assert refused_first.startswith(f"User:{AIRFLOW.default_user} may not ALTER or CLUSTER_ACTION Cluster (WriteTxnMarkers")
    assert [v for _, v, _ in read_committed(admin, pipeline.output, 2)] == [b"held"] * 6  # both markers made them visible
