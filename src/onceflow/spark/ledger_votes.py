"""Record a data source's vote in the ledger.

Runs in the Python worker of a data source's ``commit(messages)``, not in the
driver (ENVIRONMENT.md), so it rebuilds the pipeline's runtime from the data
source's ``spec`` and ``deployment`` options (secrets from the environment).
"""

from __future__ import annotations

from ..protocol.participant import Vote


SPEC_OPTION = "spec"


def record_vote_in_ledger(spec_json: str, deployment_option: str, vote: Vote) -> None:
    """Idempotent for the same vote; a zombie attempt's vote raises StaleAttempt.

    ``spec_json`` is the pipeline's ``PipelineSpec.to_json()``, passed to the
    data source as the ``spec`` option."""
    from ..runtime import Deployment, PipelineRuntime
    from ..spec import PipelineSpec

    spec = PipelineSpec.from_json(spec_json)
    runtime = PipelineRuntime(spec, Deployment.from_option(deployment_option), identity=f"spark:{spec.name}")
    runtime.coordinator.record_vote(vote.batch_seq, vote.attempt, vote)
