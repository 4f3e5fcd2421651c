"""Record a data source's vote in the pipeline's ledger.

Runs in the Python worker of a data source's ``commit(messages)``, not in the
driver (docs/protocol.md, "One batch"). A vote needs the ledger and nothing else: the
pipeline's name and the deployment (the data source's ``pipeline`` and
``deployment`` options) reach it; no spec, runtime or participant is built.
"""

from __future__ import annotations

from ..protocol.participant import Vote


def record_vote_in_ledger(pipeline: str, deployment_option: str, vote: Vote) -> None:
    """Idempotent for the same vote; a zombie attempt's vote raises StaleAttempt."""
    from ..coordinator import Coordinator
    from ..deployment import Deployment

    deployment = Deployment.from_option(deployment_option)
    Coordinator(deployment.ledger_storage(), pipeline, participants={}, identity=f"spark:{pipeline}").record_vote(vote.batch_seq, vote.attempt, vote)
