"""How long the onceflow page's ledger reads take on a long-lived pipeline.

Builds a ledger of N committed batches (real files on local disk, written as
the coordinator writes them), then times what the page does per request: a
page of the newest batches (``batch_page``) and a page far back
(``?before=``), against the baseline a naive page would pay: a listing of
the whole ledger (``LedgerStorage.list``). Kafka (lag) is not part of this:
it costs the same round trips at any ledger size.

    .venv/bin/python benchmarks/ui_page.py --batches 10000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

from onceflow.core.coordinator import Coordinator
from onceflow.core.ledger.ledger import BATCH_EFFECT
from onceflow.core.ledger.records import Decision, DecisionOutcome, DoneMarker, Head
from onceflow.core.ledger.storage import open_ledger_storage
from onceflow.core.participant import Vote
from onceflow.core.plan import OffsetRange, Plan, SinkPlan
from onceflow.pipeline.spec import PipelineSpec, SinkSpec
from onceflow.airflow.ui.overview import PAGE_SIZE, batch_page

SPEC = PipelineSpec("bench", ("in",), "m:f", (SinkSpec("out", "files", "out"),))


def build(root: str, batches: int) -> Coordinator:
    # describe() needs the sink names only: no participant is called
    coordinator = Coordinator(open_ledger_storage(root), SPEC.name, participants={"out": None})
    ledger = coordinator.ledger

    def committed(seq: int) -> None:
        plan = Plan(SPEC.name, seq, (OffsetRange("in", 0, (seq - 1) * 100, seq * 100),), (SinkPlan("out", "files", 1),),
                    run_id=f"scheduled__{seq}")
        ledger.create_plan(plan)
        ledger.claim_attempt(seq, "bench", seq * 1000)
        vote = Vote("out", seq, 1, {}, 100)
        ledger.create_vote(vote, seq * 1000 + 10)
        ledger.create_decision(Decision(seq, DecisionOutcome.COMMIT, 1, {"out": vote}, "bench", seq * 1000 + 20, "all votes valid"))
        ledger.create_done(DoneMarker(seq, "out", DecisionOutcome.COMMIT, "done", "bench", seq * 1000 + 30))
        ledger.create_done(DoneMarker(seq, BATCH_EFFECT, DecisionOutcome.COMMIT, "all effects applied", "bench", seq * 1000 + 40))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(committed, range(1, batches + 1)))
    ledger.write_head(Head(latest_seq=batches, last_committed_seq=batches))
    return coordinator


def timed(action, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="onceflow-ui-bench-") as root:
        started = time.perf_counter()
        coordinator = build(root, args.batches)
        print(f"ledger of {args.batches} committed batches built in {time.perf_counter() - started:.1f} s")
        runtime = SimpleNamespace(reader=coordinator, spec=SPEC)
        newest = timed(lambda: batch_page(runtime, limit=PAGE_SIZE), args.rounds)
        far_back = timed(lambda: batch_page(runtime, before=args.batches // 2, limit=PAGE_SIZE), args.rounds)
        listing = timed(lambda: coordinator.ledger.storage.list(), args.rounds)
        print(f"| read | median of {args.rounds} | vs a full listing |")
        print("| --- | --- | --- |")
        print(f"| newest page ({PAGE_SIZE} batches) | {newest * 1000:.0f} ms | {newest / listing:.3f} |")
        print(f"| a page from the middle (?before={args.batches // 2}) | {far_back * 1000:.0f} ms | {far_back / listing:.3f} |")
        print(f"| full listing of the ledger (baseline) | {listing * 1000:.0f} ms | 1 |")


if __name__ == "__main__":
    main()
