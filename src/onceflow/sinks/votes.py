"""Where a sink's Spark data source hands its vote over: ONE route, ``record_vote``, for every kind.

The data source's ``commit(messages)`` runs in a Python worker, not in the
driver's process (docs/protocol.md, "One batch"), so the vote cannot travel back through
driver memory: it must be written somewhere durable from that worker.

With the ``pipeline`` and ``deployment`` options (what ``onceflow.spark.batch_job``
passes every kind) ``record_vote`` records the vote in the pipeline's ledger
through the coordinator, which refuses a zombie attempt's vote. Without them,
it writes the vote as JSON to the ``vote_path`` option (create-if-absent): for
using a data source on its own, outside a pipeline.
"""

from __future__ import annotations

import json
from typing import Mapping

from onceflow.storage import storage_for
from onceflow.core.batch_id import BatchId
from onceflow.core.participant import Vote

VOTE_PATH_OPTION = "vote_path"


def record_vote(options: Mapping[str, str], vote: Vote) -> None:
    """Make ``vote`` durable, all of it (records withheld and the batch it replaces included). Runs in
    the Python worker of the data source's commit. A zombie attempt's vote raises StaleAttempt. In the
    ledger the same vote again is a no-op and a different one is refused; at ``vote_path`` any second
    vote is refused."""
    if options.get("pipeline") and options.get("deployment"):
        record_vote_in_ledger(options["pipeline"], options["deployment"], vote)
        return
    path = options.get(VOTE_PATH_OPTION)
    if not path:
        raise ValueError(f"writer option {VOTE_PATH_OPTION!r} is not set: the job has nowhere to record the vote "
                         f"of batch {BatchId(vote.batch_seq)} attempt {vote.attempt}; pass .option('{VOTE_PATH_OPTION}', uri)")
    data = json.dumps(vote.to_dict(), sort_keys=True).encode()
    if not storage_for(path, options=options).create_if_absent(path, data):
        raise FileExistsError(f"a vote of {vote.participant} for batch {BatchId(vote.batch_seq)} attempt {vote.attempt} "
                              f"is already recorded at {path}; a batch attempt votes once: run a new attempt")


def record_vote_in_ledger(pipeline: str, deployment_option: str, vote: Vote) -> None:
    """The vote into the pipeline's ledger: the pipeline's name and the deployment reach the worker as
    options; no spec, runtime or participant is built."""
    from onceflow.core.coordinator import Coordinator
    from onceflow.core.ledger.storage import deployment_ledger_storage
    from onceflow.config.deployment import Deployment

    deployment = Deployment.from_option(deployment_option)
    Coordinator(deployment_ledger_storage(deployment), pipeline, participants={}, identity=f"spark:{pipeline}").record_vote(vote.batch_seq, vote.attempt, vote)


def read_recorded_vote(path: str, options: Mapping[str, str] | None = None) -> Vote | None:
    """The vote ``record_vote`` wrote to ``path`` (the ``vote_path`` route), or None."""
    data = storage_for(path, options=options).read_bytes(path)
    return None if data is None else Vote.from_dict(json.loads(data))
