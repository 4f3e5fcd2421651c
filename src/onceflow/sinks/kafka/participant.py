"""KafkaSinkParticipant: one Kafka output topic taking part in a batch.

Runs on an Airflow worker (commit task, rollback task, recovery of a later
run). The Spark side produces with ``writer.TransactionalSplitWriter`` and
puts the handles in the vote with ``handle.vote_payload``. The sink
contract's calls, and the module that does each job::

    verify(vote)          verify: every handle belongs to this sink, its staged copy
                          exists, its transaction is still open and young enough
    commit(vote)          commit: EndTxn(commit) for every open split, by the strategy
                          its broker profile chooses, then one read proves each visible;
                          repair: a split the broker aborted, from its staged copy;
                          hanging: a split whose coordinator dropped a commit marker;
                          withheld: then the records too large for the topic, once
    abort(plan, votes)    abort: EndTxn(abort) for known handles, fence every id the
                          plan allows, read what is left (``answers.ABORT_LEFT``)
    after_commit(plan)    the batch's staged copies are deleted
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from onceflow.config.broker_profiles import PROFILES, BrokerProfile
from onceflow.core import faults
from onceflow.core.participant import Outcome, Participant, Result, Vote
from onceflow.core.plan import Plan
from onceflow.kafka.config import base_config
from onceflow.kafka.lifetime import DEFAULT_SAFETY_FRACTION, DEFAULT_TRANSACTION_TIMEOUT_MS
from onceflow.sinks.kafka.abort import abort
from onceflow.sinks.kafka.answers import worst
from onceflow.sinks.kafka.commit import COMMIT_STRATEGIES
from onceflow.sinks.kafka.output import KafkaOutput
from onceflow.sinks.kafka.verify import verify
from onceflow.sinks.kafka.visibility import Observer
from onceflow.sinks.kafka.withheld import publish_withheld
from onceflow.sinks.votes import UnreadablePayload
from onceflow.storage import Storage, storage_for
from onceflow.sinks.kafka.handle import handles_of

AFTER_END_TXN = faults.declare("kafka.commit.after_end_txn", "Kafka sink commit: EndTxn sent for every split, nothing verified yet")


class KafkaSinkParticipant(Participant):
    """The Participant for one Kafka output topic of a pipeline."""

    def __init__(
        self,
        name: str,
        pipeline: str,
        config: Mapping[str, Any],
        staging_root: str,
        storage: Storage | None = None,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        safety_fraction: float = DEFAULT_SAFETY_FRACTION,
        timeout_s: float = 30.0,
        broker: BrokerProfile = PROFILES["apache"],
    ):
        if not 0 < safety_fraction < 1:
            raise ValueError(f"safety_fraction must be between 0 and 1 (exclusive), got {safety_fraction}")
        self.name = name
        self.pipeline = pipeline
        self.output = KafkaOutput(name, pipeline, base_config(config), staging_root, storage or storage_for(staging_root),
                                  transaction_timeout_ms, safety_fraction, timeout_s, broker)

    def verify(self, vote: Vote) -> Result:
        """Before the decision: can every handle of this vote still be committed?"""
        try:
            return verify(self.output, vote)
        except UnreadablePayload as exc:
            return self._unreadable(vote, exc)

    def commit(self, vote: Vote) -> Result:
        """Commit every handle of the vote, proven by reading; repair if the broker aborted one."""
        try:
            voted = handles_of(vote)
        except UnreadablePayload as exc:
            return self._unreadable(vote, exc)
        handles = [h for h in voted if h.partitions and h.transactional]
        results = []
        if handles:
            commit_by = COMMIT_STRATEGIES[self.output.broker.describes_transactions]
            with Observer(self.output.config, self.output.timeout_s) as obs:
                results = commit_by(self.output, obs, handles, lambda: faults.fault_point(AFTER_END_TXN))
        direct = [h for h in voted if not h.transactional]
        if direct:
            results.append(Result(Outcome.ALREADY_DONE, f"{sum(h.records for h in direct)} record(s) written visibly by "
                                  f"the job ({direct[0].guarantee}: no transaction to end)"))
        if all(r.ok for r in results):  # the batch's records are in the topic: now the ones it could not take
            results += [publish_withheld(self.output.storage, self.output.staging_root, h) for h in voted if h.withheld]
        return worst(results) if results else Result(Outcome.ALREADY_DONE, "wrote nothing")

    def abort(self, plan: Plan, votes: Sequence[Vote]) -> Result:
        """End known transactions, fence every id the plan allows, delete staging."""
        try:
            return abort(self.output, plan, votes)
        except UnreadablePayload as exc:
            return self._unreadable(votes[0], exc)

    def after_commit(self, plan: Plan) -> None:
        """After the batch is committed: its staged copies are no longer needed. Idempotent."""
        self.output.delete_staging(plan.batch_id)

    def _unreadable(self, vote: Vote, exc: UnreadablePayload) -> Result:
        return Result(Outcome.FAILED, f"kafka sink {self.name} of {self.pipeline}, vote of batch {vote.batch_seq} "
                      f"attempt {vote.attempt}: {exc}")
