"""A zombie of batch N can neither add to nor abort batch N+1 (I5), on Apache Kafka.

The zombie is a real process: a Spark task of batch 1 that passed every check it makes, paused
there (SIGSTOP) while batch 1 committed without it, and resumed once batch 2 has opened its
transactions. Resumed, it opens its transaction and writes, then fences every id of its plan, as
a failed job's abort does. Batches nearer than TXN_ID_POOL never share a transactional id
(``sinks.kafka.ids``), so all of that lands on batch 1's ids: batch 2 commits as it is, with no
repair, and no record of the zombie is ever visible. (With ids shared by consecutive batches, the
zombie's init_transactions aborted batch 2's open transactions, which only the repair from staged
copies saved; what a zombie does to the batch TXN_ID_POOL later, which does share them:
test_pooled_ids.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

from onceflow.sinks.kafka.ids import transactional_ids
from onceflow.sinks.kafka.participant import KafkaSinkParticipant
from onceflow.sinks.kafka.staged import staged_uri
from onceflow.core.batch_id import BatchId
from onceflow.core.participant import Outcome
from tests.integration.kafka.helpers import batch_value, create_topic, precommit_batch, read_committed
from tests.support import ROOT

ZOMBIE = Path(__file__).with_name("zombie_child.py")


def test_a_zombie_of_one_batch_resumed_while_the_next_is_open_neither_adds_to_nor_aborts_it(one_kafka_broker, tmp_path):
    config = one_kafka_broker.config()
    topic = create_topic(config, partitions=2, prefix="zombie")
    pipeline = f"p-{uuid.uuid4().hex[:6]}"
    job = dict(config=config, pipeline=pipeline, batch_id=str(BatchId(1)), topic=topic,
               staged_uri=staged_uri(str(tmp_path), pipeline, "out", str(BatchId(1)), 0, 0),
               plan_ids=list(transactional_ids(pipeline, "out", 2, 1)))
    zombie = subprocess.Popen([sys.executable, str(ZOMBIE), json.dumps(job)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert zombie.stdout.readline().strip() == "checked"
        zombie.send_signal(signal.SIGSTOP)  # paused after its checks
        participant = KafkaSinkParticipant("out", pipeline, config, staging_root=str(tmp_path),
                                           broker=one_kafka_broker.broker)
        assert participant.commit(precommit_batch(config, topic, tmp_path, pipeline, (50, 50), 1)).outcome is Outcome.DONE
        second = precommit_batch(config, topic, tmp_path, pipeline, (50, 50), 2)  # batch 2's transactions are open

        zombie.send_signal(signal.SIGCONT)
        zombie.stdin.write("go\n")
        zombie.stdin.flush()
        assert zombie.stdout.readline().strip() == "fenced"
        assert zombie.wait(30) == 0

        assert participant.verify(second).outcome is Outcome.DONE  # still open: nothing aborted them
        result = participant.commit(second)
    finally:
        if zombie.poll() is None:
            zombie.send_signal(signal.SIGCONT)
            zombie.kill()
    assert result.outcome is Outcome.DONE and "repaired" not in result.detail, result.detail
    values = Counter(v for _, v, _ in read_committed(config, topic, 2))
    assert values == Counter(batch_value(seq, split, i) for seq in (1, 2) for split in range(2) for i in range(50))
