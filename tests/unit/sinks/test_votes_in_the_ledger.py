"""A data source's vote goes into the pipeline's ledger through the ledger alone: the Python worker
that records it builds no coordinator (it has no participant), and the ledger's rules still hold."""

from __future__ import annotations

import pytest

from onceflow.config.deployment import Deployment
from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.core.batch_view import LedgerView
from onceflow.core.errors import StaleAttempt
from onceflow.core.ledger.storage import deployment_ledger_storage
from onceflow.core.participant import Vote
from onceflow.core.states import BatchState
from onceflow.sinks import votes
from onceflow.sinks.votes import record_vote

from tests.doubles.helpers import config, source, world_coordinator


@pytest.fixture
def ledger(tmp_path):
    """A planned batch with its first attempt begun (what the plan task and the Spark driver do), and
    the options every kind's data source is given."""
    deployment = Deployment((tmp_path / "warehouse").as_uri(), KafkaCluster("127.0.0.1:9"))
    coord, _world, parts = world_coordinator(deployment_ledger_storage(deployment))
    plan = coord.plan_next(source(), config())
    attempt = coord.begin_attempt(plan.batch_seq)
    options = {"pipeline": coord.pipeline, "deployment": deployment.to_option()}
    return coord, parts, plan, attempt, options


def test_the_vote_is_recorded_without_a_coordinator(ledger):
    coord, parts, plan, attempt, options = ledger
    assert not hasattr(votes, "Coordinator")  # the worker has no participants to give one
    cast = [participant.prepare(plan, attempt) for participant in parts.values()]
    for vote in cast:
        record_vote(options, vote)
    status = LedgerView(coord.ledger.storage, coord.pipeline).describe(plan.batch_seq)
    assert status.state is BatchState.PREPARED and set(status.votes) == set(parts)
    record_vote(options, cast[0])  # the same vote again: a no-op


def test_the_ledger_refuses_a_zombie_s_vote_a_second_vote_and_an_unknown_sink(ledger):
    coord, parts, plan, attempt, options = ledger
    first = parts["files"].prepare(plan, attempt)
    record_vote(options, first)
    with pytest.raises(StaleAttempt, match="already has a different vote"):
        record_vote(options, Vote(first.participant, first.batch_seq, attempt, {"other": 1}, records=first.records + 1))
    newer = coord.begin_attempt(plan.batch_seq)
    with pytest.raises(StaleAttempt, match=f"attempt {attempt} of 'events' is not the latest"):
        record_vote(options, parts["events"].prepare(plan, attempt))
    with pytest.raises(ValueError, match="has no sink 'nowhere'"):
        record_vote(options, Vote("nowhere", plan.batch_seq, newer))
