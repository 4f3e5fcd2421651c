"""Finding the latest state costs a constant number of storage requests,
however many batches the ledger holds (counted on S3 with botocore hooks)."""

from __future__ import annotations

import collections
import uuid
from concurrent.futures import ThreadPoolExecutor

from onceflow.core.ledger.ledger import BATCH_EFFECT
from onceflow.core.ledger.records import Decision, DecisionOutcome, DoneMarker, Head
from onceflow.core.ledger.storage import LedgerStorage
from onceflow.storage.s3 import S3Storage
from onceflow.core.coordinator import Coordinator
from onceflow.core.plan import OffsetRange, Plan
from onceflow.core.states import BatchState
from tests.doubles.fakes import FakeSource, World, participants
from tests.doubles.helpers import config


def ledger_with(batches: int, bucket: str, endpoint) -> tuple[Coordinator, collections.Counter]:
    storage = LedgerStorage(S3Storage(endpoint), f"s3://{bucket}/count-{uuid.uuid4().hex[:6]}")
    coord = Coordinator(storage, "big", participants("world", World()))
    ledger = coord.ledger

    def committed_batch(seq: int) -> None:
        plan = Plan("big", seq, (OffsetRange("in", 0, (seq - 1) * 10, seq * 10),))
        ledger.create_plan(plan)
        ledger.create_decision(Decision(seq, DecisionOutcome.COMMIT, 1, {}, "seed", 0, "seeded"))
        ledger.create_done(DoneMarker(seq, BATCH_EFFECT, DecisionOutcome.COMMIT, "", "seed", 0))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(committed_batch, range(1, batches + 1)))
    ledger.write_head(Head(latest_seq=batches, last_committed_seq=batches))
    counts: collections.Counter = collections.Counter()
    # before-send.s3.<Operation> fires once per HTTP request, retries included
    storage.storage.client.meta.events.register("before-send.s3", lambda event_name, **_: counts.update([event_name.rsplit(".", 1)[-1]]))
    return coord, counts


def cost(counts: collections.Counter, action) -> dict:
    counts.clear()
    action()
    return dict(counts)


def test_latest_state_costs_the_same_with_1_and_1000_batches(s3_bucket, s3_endpoint):
    costs = {}
    for batches in (1, 1000):
        coord, counts = ledger_with(batches, s3_bucket, s3_endpoint)
        src = FakeSource()
        src.add("in", 0, batches * 10 + 5)
        costs[batches] = {
            "latest_seq": cost(counts, coord.latest_seq),
            "recover": cost(counts, coord.recover),
            "describe": cost(counts, coord.describe),
        }
        assert coord.describe().state is BatchState.COMMITTED
        costs[batches]["plan_next"] = cost(counts, lambda: coord.plan_next(src, config()))
        assert coord.latest_seq() == batches + 1
        assert coord.plan(batches + 1).ranges == (OffsetRange("in", 0, batches * 10, batches * 10 + 5),)
        # the probe is bounded even when the hint is missing: O(log n), no listing
        coord.ledger.storage.storage.delete(coord.ledger.storage.describe(coord.ledger.head_key))
        costs[batches]["latest_seq_no_hint"] = cost(counts, coord.latest_seq)
    print(costs)
    for op in ("latest_seq", "recover", "describe", "plan_next"):
        assert costs[1][op] == costs[1000][op], op
    assert costs[1]["latest_seq"] == {"GetObject": 3}  # head + plan of the hinted batch + absent next plan
    assert costs[1000]["latest_seq_no_hint"] == {"GetObject": costs[1000]["latest_seq_no_hint"]["GetObject"]}
    assert costs[1000]["latest_seq_no_hint"]["GetObject"] <= 2 * 11 + 1  # gallop + bisect over 1,000
    assert all(set(c) <= {"GetObject", "PutObject"} for per_n in costs.values() for c in per_n.values())  # never a listing
