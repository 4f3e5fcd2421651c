"""Aborting a Kafka output's batch: EndTxn(abort) for known handles, then fence every id the plan allows.

Runs on an Airflow worker (rollback task, recovery). Both are repeatable.
Then what is left of each voted split is read (``answers.ABORT_LEFT``), and
the batch's staging is deleted once nothing may still need it.
"""

from __future__ import annotations

from typing import Sequence

from onceflow.core.participant import Outcome, Result, Vote
from onceflow.core.plan import Plan
from onceflow.sinks.kafka.answers import Left, left_after_abort, worst
from onceflow.sinks.kafka.fencing import FencingError, fence_transactional_ids
from onceflow.sinks.kafka.handle import TxnHandle, handles_of
from onceflow.sinks.kafka.output import KafkaOutput
from onceflow.sinks.kafka.split_state import SplitView
from onceflow.sinks.kafka.visibility import observe


def abort(output: KafkaOutput, plan: Plan, votes: Sequence[Vote]) -> Result:
    voted = [h for vote in votes for h in handles_of(vote) if h.partitions]
    written = [h for h in voted if h.transactional]
    replies = output.end_txns(written, commit=False)
    details = [f"{h.transactional_id}: EndTxn(abort) {reply.error_name}" for h, reply in zip(written, replies)]
    details += [f"split {h.split}: {h.records} record(s) stay visible ({h.guarantee}: written without a transaction)"
                for h in voted if not h.transactional]
    try:
        ids = plan.sink(output.name).transactional_ids
    except KeyError as exc:
        return Result(Outcome.FAILED, str(exc))
    try:
        fence_transactional_ids(output.config, ids, output.timeout_s)
    except FencingError as exc:
        return Result(Outcome.RETRY_LATER, str(exc))
    lefts = [left(output, h, view) for h, view in zip(written, observe(output.config, written, output.timeout_s))]
    unfinished = worst([r for r in lefts if r is not None and not r.ok])
    if not unfinished.ok:
        return unfinished  # staging stays: a split not ended may still need it, one committed outside is evidence
    details += [r.detail for r in lefts if r is not None]
    output.delete_staging(plan.batch_id)
    return Result(Outcome.DONE, f"fenced {len(ids)} transactional id(s); " + "; ".join(details))


def left(output: KafkaOutput, h: TxnHandle, view: SplitView) -> Result | None:
    """What the abort reports for the split, as ``ABORT_LEFT`` says (None: aborted, nothing to say)."""
    where, what = h.where(), left_after_abort(view.state, output.broker)
    if what is Left.ABORTED:
        return None
    if what is Left.NOT_ENDED:
        return Result(Outcome.RETRY_LATER, f"{where}: {view.state.value} after fencing ({view.describe()}); "
                      "run the rollback again")
    if what is Left.SHOWN:
        return Result(Outcome.DONE, f"{where}: visible after the abort ({view.describe()}), as every aborted "
                      f"record is on a broker of profile {output.broker.name!r}")
    return Result(
        Outcome.FAILED,
        f"{where}: visible after the abort ({view.describe()}) on a broker whose profile ({output.broker.name!r}) "
        f"hides aborted records, so the transaction was committed without a COMMIT decision, by something other "
        f"than this pipeline's commit (another deployment of pipeline {output.pipeline!r}, or a tool that ended "
        "the transaction from its handle). Readers have seen records of a batch that is not committed, and a "
        "replay would write them again: the batch stays ABORTING and the pipeline stops here. Stop that "
        "writer, then decide what becomes of these records (docs/brokers.md, \"Visible after an abort\")",
    )
