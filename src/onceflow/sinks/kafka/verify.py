"""Before the COMMIT decision: can every handle of a Kafka vote still be committed?

Runs on an Airflow worker (commit task). Every handle belongs to this sink,
its withheld records and staged copy exist, its transaction is still open
and younger than safety_fraction * transaction.timeout.ms.
"""

from __future__ import annotations

import time

from onceflow.core.participant import Outcome, Result, Vote
from onceflow.sinks.kafka.ids import is_split_id
from onceflow.sinks.kafka.coordinators import TransactionState, describe_transactions, recorded_state
from onceflow.sinks.kafka.handle import TxnHandle, handles_of
from onceflow.sinks.kafka.output import KafkaOutput
from onceflow.sinks.kafka.split_state import SplitState
from onceflow.sinks.kafka.visibility import Observer


def verify(output: KafkaOutput, vote: Vote) -> Result:
    problems = []
    now_ms = int(time.time() * 1000)
    to_observe = []
    for h in handles_of(vote):
        where = h.where()
        if (h.pipeline, h.sink) != (output.pipeline, output.name) or not is_split_id(h.transactional_id, h.pipeline, h.sink, h.split, vote.batch_seq):
            problems.append(f"{where}: handle does not belong to sink {output.name} of {output.pipeline}")
            continue
        if h.withheld and output.storage.size(h.withheld_uri) is None:
            problems.append(f"{where}: the file of its {h.withheld} withheld records {h.withheld_uri} is missing")
            continue
        if not h.partitions or not h.transactional:
            continue  # nothing written, or written visibly by the job (a weaker guarantee): nothing to keep open
        age = now_ms - h.first_write_ms
        if age > output.max_vote_age_ms:
            problems.append(
                f"{where}: transaction is {age} ms old, over {output.safety_fraction} of transaction.timeout.ms "
                f"({output.transaction_timeout_ms}); abort and re-run the batch (offsets did not move, nothing is lost)"
            )
            continue
        if not output.staged_exists(h):
            problems.append(f"{where}: staged copy {h.staged_uri} is missing, a broker abort could not be repaired")
            continue
        to_observe.append(h)
    if to_observe and not problems:
        problems += not_open(output, to_observe)
    if problems:
        return Result(Outcome.FAILED, "; ".join(problems))
    return Result(Outcome.DONE, f"{len(to_observe)} transaction(s) open and young enough")


def not_open(output: KafkaOutput, handles: list[TxnHandle]) -> list[str]:
    """A problem for each handle whose transaction is no longer open: as its coordinator reports it
    where the profile trusts that, else as a read_committed reader sees it."""
    if output.broker.describes_transactions:
        views = describe_transactions(output.config, [h.transactional_id for h in handles], output.timeout_s)
        return [
            f"{h.where()}: transaction is no longer open ({views.get(h.transactional_id, 'no answer from its coordinator')})"
            for h in handles
            if recorded_state(views, h) is not TransactionState.ONGOING
        ]
    with Observer(output.config, output.timeout_s) as obs:
        views = obs.observe(handles)
    return [
        f"{h.where()}: transaction is no longer open ({view.state.value}: {view.describe()})"
        for h, view in zip(handles, views)
        if view.state is not SplitState.OPEN
    ]
