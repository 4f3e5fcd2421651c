"""Repairing a hanging commit: its coordinator reports CompleteCommit, a partition still holds it open.

Runs on an Airflow worker (commit task), for brokers whose profile
``describes_transactions``. The coordinator dropped that partition's marker
(its leader died as the transaction ended: docs/brokers.md, "Hanging
transactions"); the commit writes the COMMIT markers the coordinator decided
on (``markers.write_commit_markers``), then reads again.
"""

from __future__ import annotations

from onceflow.core.participant import Outcome, Result
from onceflow.kafka.config import principal
from onceflow.sinks.kafka.handle import TxnHandle
from onceflow.sinks.kafka.hidden_repairs import confirm_aborted
from onceflow.sinks.kafka.markers import write_commit_markers
from onceflow.sinks.kafka.output import KafkaOutput
from onceflow.sinks.kafka.split_state import SplitState, SplitView
from onceflow.sinks.kafka.visibility import Observer


def finish_hanging(output: KafkaOutput, obs: Observer, hanging: list[tuple[int, TxnHandle, SplitView]],
                   ended_here: set[int]) -> dict[int, Result]:
    """Write the COMMIT markers of the ``hanging`` splits (key, handle, view), all of them before looking
    again: two splits' hanging transactions in one partition each hold the other's records back."""
    if not hanging:
        return {}
    handles = [h for _, h, _ in hanging]
    written = [write_commit_markers(output.config, h.topic, [v.partition for v in view.partitions if v.open],
                                    h.producer_id, h.epoch, output.timeout_s) for _, h, view in hanging]
    # Only a marker written now can make them visible soon; held back by another open transaction, a look is enough.
    wait = any(o.written for marked in written for o in marked.values())
    after = confirm_aborted(obs, handles, obs.observe_until_ended(handles) if wait else obs.observe(handles))
    results = {}
    for (key, h, _), view, marked in zip(hanging, after, written):
        markers = ", ".join(f"p{p}: {o}" for p, o in sorted(marked.items()))
        now = sorted(p for p, o in marked.items() if o.written)
        if view.state is SplitState.COMMITTED:
            if now:
                results[key] = Result(Outcome.DONE, f"{h.where()}: committed; its coordinator had reported "
                                      f"CompleteCommit without the commit marker of partition(s) {now}, written "
                                      f"now ({markers}); {h.records} records visible")
            else:  # its markers came, or what held them back ended, while this commit looked
                results[key] = Result(Outcome.DONE if key in ended_here else Outcome.ALREADY_DONE,
                                      f"{h.where()}: committed, {h.records} records visible after a wait ({markers})")
            continue
        if all(o.not_open for o in marked.values()) and any(o.holders for o in marked.values()):
            results[key] = Result(
                Outcome.RETRY_LATER,
                f"{h.where()}: committed, its markers written, but not yet visible ({view.describe()}): another "
                f"transaction still open in the partition holds its records back ({markers}), an earlier batch of "
                "this pipeline still in flight or another producer. They become visible when it ends; re-run the "
                "commit task then")
            continue
        results[key] = Result(
            Outcome.RETRY_LATER,
            f"{h.where()}: its coordinator reports the commit complete, but the records are not visible "
            f"({view.describe()}): a partition's commit marker was never written (Apache Kafka drops the markers "
            f"of a partition whose leader died as the transaction ended), and writing it did not end it "
            f"({markers}). Grant the commit task's Kafka principal ({principal(output.config)}) ALTER or "
            "CLUSTER_ACTION on the cluster (WriteTxnMarkers: the optional grant of `onceflow acls`), or find what "
            "holds the partition (kafka-transactions.sh find-hanging), then re-run the commit task "
            "(docs/security.md; docs/brokers.md, \"Hanging transactions\")",
        )
    return results
