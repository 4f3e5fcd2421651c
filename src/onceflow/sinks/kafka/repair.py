"""Repairing a split the broker aborted: its staged copy, published once, under the repair id.

Runs on an Airflow worker (commit task, recovery). A repair runs under the
split's repair id: initialising it fences any other repairer and aborts a
repair that crashed half-way, and the data is observed again after that
fence, so a repair is published once. A repair that another open
transaction hides from read_committed readers is looked for past the last
stable offset too (``hidden_repairs.confirm_aborted``): the split is then
held back, and nothing is published again.
"""

from __future__ import annotations

from confluent_kafka import KafkaException, Producer
from kafka.errors import KafkaError

from onceflow.core.participant import Outcome, Result
from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import producer_config
from onceflow.sinks.kafka.ids import repair_id
from onceflow.kafka.produce import produce_waiting
from onceflow.sinks.kafka.answers import inconsistent, unreadable
from onceflow.sinks.kafka.handle import TxnHandle, handle_headers
from onceflow.sinks.kafka.headers import REPAIR
from onceflow.sinks.kafka.hidden_repairs import confirm_aborted
from onceflow.sinks.kafka.markers import open_transactions
from onceflow.sinks.kafka.output import KafkaOutput
from onceflow.sinks.kafka.split_state import SplitState, SplitView
from onceflow.sinks.kafka.staged import StagedCopyDamaged, open_staged
from onceflow.sinks.kafka.visibility import Observer


def look_again(obs: Observer, h: TxnHandle, until_ended: bool = False) -> SplitView:
    """The split's view now (``until_ended``: read while it is open), an ABORTED one confirmed."""
    view = obs.observe_until_ended([h]) if until_ended else obs.observe([h])
    return confirm_aborted(obs, [h], view)[0]


def repair(output: KafkaOutput, obs: Observer, h: TxnHandle) -> Result:
    """Re-publish the staged copy in a fresh transaction under the repair id, once."""
    where = h.where()
    if not output.staged_exists(h):
        return Result(
            Outcome.FAILED,
            f"{where}: the broker aborted the transaction and the staged copy {h.staged_uri} is gone; "
            f"{h.records} records are NOT in the output. Restore the staged copy and re-run commit",
        )
    rid = repair_id(h.transactional_id)
    producer = Producer(producer_config(output.config, rid, **{"linger.ms": 20,
                                                               "transaction.timeout.ms": output.transaction_timeout_ms},
                                        **({"message.max.bytes": h.max_record_bytes} if h.max_record_bytes else {})))
    try:
        producer.init_transactions(output.timeout_s)  # fences other repairers, aborts a half-done repair
        again = look_again(obs, h)
        if again.state is SplitState.REPAIRED:
            return Result(Outcome.ALREADY_DONE, f"{where}: repaired earlier")
        if again.state is SplitState.HELD_BACK:  # not a repair this fence ended: one held back by another producer
            return held_back(output, h, again)
        if again.state is SplitState.UNKNOWN:
            return unreadable(where, again, output.timeout_s)
        if again.state is not SplitState.ABORTED:
            return inconsistent(where, again)
        try:
            table = open_staged(h.staged_uri, output.storage, h.staged_sha256)
        except StagedCopyDamaged as exc:
            return Result(Outcome.FAILED, f"{where}: the broker aborted the transaction and {exc}; {h.records} records "
                          "are NOT in the output. Restore the staged copy the vote names and re-run commit")
        base = handle_headers(h) + [REPAIR]
        producer.begin_transaction()
        for row in table.to_pylist():
            user = [(x["key"], x["value"]) for x in row["headers"]] if row["headers"] else []
            produce_waiting(producer, h.topic, row["value"], row["key"], row["partition"], headers=base + user)
        producer.commit_transaction(output.timeout_s)
    except KafkaException as exc:
        refusals.check(output.config, exc.args[0].code(), f"{where}: re-publishing its staged copy under {rid}",
                       {Resource.TOPIC: ("WRITE", h.topic), Resource.TRANSACTIONAL_ID: ("WRITE", rid)})
        return Result(Outcome.RETRY_LATER, f"{where}: repair under {rid} did not complete: {exc.args[0]}")
    finally:
        producer.flush(0)
    after = look_again(obs, h, until_ended=True)
    if after.state is SplitState.REPAIRED:
        return Result(Outcome.DONE, f"{where}: transaction was aborted by the broker; repaired from the staged copy ({h.records} records)")
    if after.state is SplitState.HELD_BACK:
        return held_back(output, h, after)
    if after.state is SplitState.UNKNOWN:
        return unreadable(where, after, output.timeout_s)
    return inconsistent(where, after)


def held_back(output: KafkaOutput, h: TxnHandle, view: SplitView) -> Result:
    """The broker aborted the split, and a repair's records wait behind another open transaction."""
    partitions = [v.partition for v in view.partitions if v.hidden_repairs]
    try:
        holders = "; ".join(f"p{p}: {', '.join(map(str, txns)) or 'DescribeProducers names none'}" for p, txns in sorted(
            open_transactions(output.config, h.topic, partitions, output.timeout_s).items()))
    except KafkaError as exc:  # naming them is a courtesy: the answer stands without it
        holders = f"DescribeProducers did not name them: {exc}"
    return Result(
        Outcome.RETRY_LATER,
        f"{h.where()}: the broker aborted its transaction, and the records of its repair are held back "
        f"({view.describe()}): an open transaction holds the partition's last stable offset before them "
        f"({holders}), so no read can tell yet whether the repair committed, and nothing is published again. "
        "Commit again once that transaction ends (docs/brokers.md, \"A repair held back\")",
    )
