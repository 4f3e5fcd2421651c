"""Record a data source's vote in the ledger.

Runs in the Python worker of a data source's ``commit(messages)``, not in the
driver (ENVIRONMENT.md), so it rebuilds the pipeline's runtime from the
environment (``ONCEFLOW_WAREHOUSE``, ``onceflow.settings``): the spark job
exports it, and Spark's Python workers inherit it.
"""

from __future__ import annotations

from ..protocol.participant import Vote


def record_vote_in_ledger(pipeline: str, vote: Vote) -> None:
    """Idempotent for the same vote; a zombie attempt's vote raises StaleAttempt."""
    from ..pipelines import get_pipeline
    from ..runtime import Deployment, PipelineRuntime

    runtime = PipelineRuntime(get_pipeline(pipeline), Deployment.from_environment(), identity=f"spark:{pipeline}")
    runtime.coordinator.record_vote(vote.batch_seq, vote.attempt, vote)
