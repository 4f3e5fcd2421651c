"""What Apache Kafka's own clocks do to a pre-committed split, on a broker whose clocks are
short: ``transaction.max.timeout.ms`` really aborts an open transaction, and an id idle past
``transactional.id.expiration.ms`` loses its producer-id mapping. Neither compatible broker
does either (they were simulated by fencing before: docs/brokers.md).

- Before the decision, such a vote is refused (verify FAILED): the batch is aborted and
  replayed, nothing is lost because the offsets did not move.
- After a COMMIT decision, the split is repaired once from its staged copy, and a second
  commit says already done; an expired mapping (INVALID_PRODUCER_ID_MAPPING) is one more
  answer that leads there, never a loop.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest

from onceflow.sinks.kafka.headers import REPAIR
from onceflow.sinks.kafka.participant import KafkaSinkParticipant
from onceflow.sinks.kafka.handle import handles_of
from onceflow.sinks.kafka.txn_protocol import end_txn
from onceflow.core.participant import Outcome
from onceflow_devkit.services.kafka_broker import TXN_TIMEOUT_ABORTS, start_broker
from tests.conftest import TEST_HOME
from onceflow_devkit.services.process import ManagedProcess
from tests.integration.kafka.helpers import batch_value, create_topic, precommit_batch, read_committed
from tests.support import require

TIMEOUT_MS = 3000
# Short clocks: the broker aborts after the producer's timeout and looks every 500 ms; ids idle
# for 2 s lose their mapping, looked for every 500 ms.
SETTINGS = {
    "transaction.max.timeout.ms": str(TIMEOUT_MS),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "transactional.id.expiration.ms": "2000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "500",
}


@pytest.fixture(scope="module")
def short_clocks():
    proc = ManagedProcess(f"kafka-clocks-{uuid.uuid4().hex[:6]}", TEST_HOME / f"clocks-{uuid.uuid4().hex[:6]}").reset()
    broker = start_broker("apache", proc, settings=SETTINGS, die_with_parent=True)
    yield broker
    proc.stop(grace=2)


def end_txn_answer(config, handle, until: str, timeout_s: float = 30.0) -> str:
    """EndTxn(commit)'s answer once it is ``until`` (the broker's clocks are not exact to the second).
    Asked with the epoch the broker's abort bumps to: the open transaction answers PRODUCER_FENCED,
    the aborted one INVALID_TXN_STATE, a forgotten id INVALID_PRODUCER_ID_MAPPING."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = end_txn(config, handle.transactional_id, handle.producer_id, handle.epoch + 1, True, 5,
                         transaction_version=handle.transaction_version).error_name
        if answer == until or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)


@pytest.mark.parametrize("expired", [False, True], ids=["timed-out", "id-expired"])
def test_a_transaction_the_broker_timed_out_is_refused_before_the_decision_and_repaired_after_it(
        short_clocks, tmp_path, expired):
    require(short_clocks, TXN_TIMEOUT_ABORTS)
    config = short_clocks.config()
    topic = create_topic(config, partitions=2, prefix="clocks")
    pipeline = f"p-{uuid.uuid4().hex[:6]}"
    vote = precommit_batch(config, topic, tmp_path, pipeline, (80,),
                           producer_overrides={"transaction.timeout.ms": TIMEOUT_MS})
    [handle] = handles_of(vote)
    participant = KafkaSinkParticipant("out", pipeline, config, staging_root=str(tmp_path),
                                       transaction_timeout_ms=TIMEOUT_MS)
    assert participant.verify(vote).outcome is Outcome.DONE  # still open, young enough

    # The broker aborts it (and bumps the epoch); then, idle, the id loses its producer-id mapping.
    until = "INVALID_PRODUCER_ID_MAPPING" if expired else "INVALID_TXN_STATE"
    assert end_txn_answer(config, handle, until) == until
    assert read_committed(config, topic, 2) == []  # the broker aborted it: nothing visible
    refused = participant.verify(vote)  # before the decision: refused, the batch is aborted and replayed
    assert refused.outcome is Outcome.FAILED, refused.detail

    result = participant.commit(vote)  # after a COMMIT decision (say verify ran in time)

    assert result.outcome is Outcome.DONE and "repaired" in result.detail, result.detail
    records = read_committed(config, topic, 2)
    assert Counter(v for _, v, _ in records) == Counter(batch_value(1, 0, i) for i in range(80))
    assert all(h[-1] == REPAIR for _, _, h in records)
    again = participant.commit(vote)
    assert again.outcome is Outcome.ALREADY_DONE, again.detail
    assert len(read_committed(config, topic, 2)) == 80
