"""The traps a pool of transactional ids opens, sprung on Apache Kafka (``sinks.kafka.ids``).

Batch 1 and batch 1 + TXN_ID_POOL share ids. The zombie is a real process: a Spark task of batch 1
that passed every check it makes, paused there (SIGSTOP) while batch 1 committed without it, and
resumed while batch 17 holds the ids. The rollback is the coordinator's, on a real ledger.

1. Resumed before batch 17's decision, the zombie's ``init_transactions`` aborts batch 17's open
   transaction: verify says so, batch 17 is aborted, and its replay (another place in the pool)
   commits. One replay per zombie, nothing lost, nothing doubled.
2. Resumed after the decision, the zombie aborts batch 17's transaction and leaves one of its own
   open on the partitions (what a task killed after its writes leaves). The commit fences it at once
   (no wait for the zombie's transaction timeout, no partition held back), repairs the split from
   its staged copy, and a retried commit publishes nothing twice.
3. A rollback of batch 1 cleared and run again while batch 17 holds the ids touches nothing of it.

Plans an older onceflow wrote with an id per batch are still committed and fenced by those ids.

Slow set: 500 batches through the participant leave at most TXN_ID_POOL ids per split (and their
repair ids) at the broker, as ListTransactions answers the admin.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest

from onceflow.core.batch_id import BatchId
from onceflow.core.coordinator import Coordinator
from onceflow.core.ledger.storage import open_ledger_storage
from onceflow.core.participant import Outcome, Vote
from onceflow.core.plan import TXN_ID_POOL, Plan, SinkPlan
from onceflow.core.planning.config import PlanConfig
from onceflow.core.states import BatchState
from onceflow.config.names import transactional_id_prefix
from onceflow.sinks.kafka.handle import handles_of
from onceflow.sinks.kafka.handle import vote_payload
from onceflow.sinks.kafka.ids import repair_id, transactional_id, transactional_ids
from onceflow.sinks.kafka.participant import KafkaSinkParticipant
from onceflow.sinks.kafka.writer import TransactionalSplitWriter
from onceflow.sinks.kafka.staged import staged_uri
from onceflow_devkit.services.kafka_transactions import list_transactional_ids
from tests.doubles.helpers import source
from tests.integration.kafka.helpers import batch_value, create_topic, precommit_batch, read_committed
from tests.support import ROOT

ZOMBIE = Path(__file__).with_name("zombie_child.py")
LATER = 1 + TXN_ID_POOL  # the first batch after batch 1 to take its ids
ZOMBIE_TIMEOUT_MS = 600_000  # the zombie's transaction would hold its partitions this long unless fenced


@pytest.fixture
def setting(one_kafka_broker, tmp_path):
    config = one_kafka_broker.config()
    topic = create_topic(config, partitions=2, prefix="pooled")
    pipeline = f"p-{uuid.uuid4().hex[:6]}"
    participant = KafkaSinkParticipant("out", pipeline, config, staging_root=str(tmp_path), broker=one_kafka_broker.broker)
    return config, topic, pipeline, participant, tmp_path


@contextmanager
def paused_zombie(config, topic, pipeline, tmp_path, **job):
    """A spark task of batch 1 past its checks, paused (SIGSTOP); ``resume()`` lets it go on and
    returns what it said when done."""
    job = dict(config=config, pipeline=pipeline, batch_id=str(BatchId(1)), topic=topic,
               staged_uri=staged_uri(str(tmp_path), pipeline, "out", str(BatchId(1)), 0, 9),
               plan_ids=list(transactional_ids(pipeline, "out", 2, 1)),
               producer_overrides={"transaction.timeout.ms": ZOMBIE_TIMEOUT_MS}, **job)
    zombie = subprocess.Popen([sys.executable, str(ZOMBIE), json.dumps(job)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def resume() -> str:
        zombie.send_signal(signal.SIGCONT)
        zombie.stdin.write("go\n")
        zombie.stdin.flush()
        said = zombie.stdout.readline().strip()
        assert zombie.wait(30) == 0
        return said

    try:
        assert zombie.stdout.readline().strip() == "checked"
        zombie.send_signal(signal.SIGSTOP)
        yield resume
    finally:
        if zombie.poll() is None:
            zombie.send_signal(signal.SIGCONT)
            zombie.kill()


def values_of(*batches: tuple[int, tuple[int, int]]) -> Counter:
    return Counter(batch_value(seq, split, i) for seq, counts in batches for split, n in enumerate(counts) for i in range(n))


def test_a_zombie_resumed_before_the_decision_of_the_batch_that_took_its_ids_costs_that_batch_one_replay(setting):
    config, topic, pipeline, participant, tmp_path = setting
    with paused_zombie(config, topic, pipeline, tmp_path) as resume:
        assert participant.commit(precommit_batch(config, topic, tmp_path, pipeline, (30, 30), 1)).outcome is Outcome.DONE
        later = precommit_batch(config, topic, tmp_path, pipeline, (40, 40), LATER)
        assert {h.transactional_id for h in handles_of(later)} == set(transactional_ids(pipeline, "out", 2, 1))
        assert resume() == "fenced"  # its init_transactions, its records, its job's abort: all on batch 17's ids

    verdict = participant.verify(later)
    assert verdict.outcome is Outcome.FAILED and "no longer open" in verdict.detail, verdict.detail
    plan = Plan(pipeline, LATER, (), (SinkPlan("out", "kafka", 2, transactional_ids(pipeline, "out", 2, LATER)),))
    assert participant.abort(plan, [later]).outcome is Outcome.DONE
    replay = precommit_batch(config, topic, tmp_path, pipeline, (40, 40), LATER + 1)  # the next place in the pool
    assert participant.verify(replay).outcome is Outcome.DONE
    assert participant.commit(replay).outcome is Outcome.DONE
    assert Counter(v for _, v, _ in read_committed(config, topic, 2)) == values_of((1, (30, 30)), (LATER + 1, (40, 40)))


def test_a_zombie_that_leaves_its_transaction_open_on_a_decided_batchs_id_is_fenced_and_the_split_repaired_once(setting):
    config, topic, pipeline, participant, tmp_path = setting
    with paused_zombie(config, topic, pipeline, tmp_path, leave_open=True) as resume:
        assert participant.commit(precommit_batch(config, topic, tmp_path, pipeline, (30, 30), 1)).outcome is Outcome.DONE
        later = precommit_batch(config, topic, tmp_path, pipeline, (40, 40), LATER)
        assert participant.verify(later).outcome is Outcome.DONE  # the decision is COMMIT
        assert resume() == "written"  # batch 17's split 0 aborted, the zombie's transaction open on its partitions

    started = time.monotonic()
    result = participant.commit(later)
    took = time.monotonic() - started
    assert result.outcome is Outcome.DONE and "repaired" in result.detail, result.detail
    assert took < 60, f"the commit waited {took:.0f} s: the zombie's transaction held the partitions"
    again = participant.commit(later)
    assert again.outcome is Outcome.ALREADY_DONE, again.detail
    assert Counter(v for _, v, _ in read_committed(config, topic, 2)) == values_of((1, (30, 30)), (LATER, (40, 40)))


def test_a_cleared_rollback_of_a_finished_batch_touches_nothing_of_the_batch_that_took_its_ids(setting):
    config, topic, pipeline, participant, tmp_path = setting
    coordinator = Coordinator(open_ledger_storage(str(tmp_path / "ledger")), pipeline, {"out": participant})
    plan_config = PlanConfig(topics=("in",), sinks=(SinkPlan("out", "kafka", 2),),
                             transactional_ids=lambda p, sink, seq: transactional_ids(p, sink.name, sink.splits, seq))
    first = coordinator.plan_next(source(10), plan_config)
    coordinator.record_vote(1, coordinator.begin_attempt(1),
                            precommit_batch(config, topic, tmp_path, pipeline, (20, 20), 1))
    assert coordinator.rollback(1, "the spark task failed").state is BatchState.ABORTED
    for seq in range(2, LATER):  # batches that died before they were started
        coordinator.plan_next(source(10), plan_config)
        coordinator.rollback(seq, "the spark task failed")
    later = coordinator.plan_next(source(10), plan_config)
    assert later.sink("out").transactional_ids == first.sink("out").transactional_ids
    coordinator.record_vote(LATER, coordinator.begin_attempt(LATER),
                            precommit_batch(config, topic, tmp_path, pipeline, (25, 25), LATER))

    assert coordinator.rollback(1, "cleared in the Airflow UI and run again").state is BatchState.ABORTED

    status = coordinator.commit(LATER)
    assert status.state is BatchState.COMMITTED
    said = status.done["out"].detail
    assert "committed" in said and "repaired" not in said, said  # nothing aborted batch 17's transactions
    assert Counter(v for _, v, _ in read_committed(config, topic, 2)) == values_of((LATER, (25, 25)))


def test_batches_planned_with_ids_per_batch_by_an_older_onceflow_still_commit_and_are_fenced_by_those(setting):
    config, topic, pipeline, participant, tmp_path = setting

    def precommit_as_planned(seq: int, records: int) -> tuple[Plan, Vote]:
        ids = tuple(transactional_id(pipeline, "out", split, seq) for split in range(2))  # onceflow.<p>.out.b<seq>.<split>
        handles = []
        for split, txn_id in enumerate(ids):
            writer = TransactionalSplitWriter(config, pipeline, "out", str(BatchId(seq)), split, topic,
                                              staged_uri(str(tmp_path), pipeline, "out", str(BatchId(seq)), split, 1),
                                              transactional_id=txn_id)
            writer.begin()
            for i in range(records):
                writer.write(batch_value(seq, split, i))
            handles.append(writer.precommit())
            writer.abandon()
        return (Plan(pipeline, seq, (), (SinkPlan("out", "kafka", 2, ids),)),
                Vote("out", seq, 1, vote_payload(handles), records=2 * records))

    aborted_plan, aborted = precommit_as_planned(1, 10)
    assert participant.abort(aborted_plan, [aborted]).outcome is Outcome.DONE
    _, committed = precommit_as_planned(2, 15)
    assert participant.verify(committed).outcome is Outcome.DONE
    assert participant.commit(committed).outcome is Outcome.DONE
    assert Counter(v for _, v, _ in read_committed(config, topic, 2)) == values_of((2, (15, 15)))


@pytest.mark.slow
def test_five_hundred_batches_leave_at_most_the_pool_of_ids_at_the_broker(secured_kafka, tmp_path):
    """The admin asks every broker (ListTransactions): the pipeline's ids are its pool, not its batches."""
    admin = secured_kafka.broker
    config = admin.config()
    topic = create_topic(config, partitions=2, prefix="pooled")
    pipeline = f"p-{uuid.uuid4().hex[:6]}"
    participant = KafkaSinkParticipant("out", pipeline, config, staging_root=str(tmp_path), broker=admin.broker)
    for seq in range(1, 501):
        vote = precommit_batch(config, topic, tmp_path, pipeline, (2, 2), seq)
        assert participant.commit(vote).outcome is Outcome.DONE
        participant.after_commit(Plan(pipeline, seq, (), ()))
    ids = list_transactional_ids(config, transactional_id_prefix(pipeline))
    pool = {i for seq in range(TXN_ID_POOL) for i in transactional_ids(pipeline, "out", 2, seq)}
    assert pool <= ids <= pool | {repair_id(i) for i in pool}, sorted(ids)  # a split repaired has a repair id too
    assert Counter(v for _, v, _ in read_committed(config, topic, 2)) == values_of(*((seq, (2, 2)) for seq in range(1, 501)))
