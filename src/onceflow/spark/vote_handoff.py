"""Where a Spark job hands its vote over: ONE isolated function, ``record_vote``.

The data source's ``commit(messages)`` runs in a Python worker, not in the
driver's process (docs/protocol.md, "One batch"), so the vote cannot travel back through
driver memory: it must be written somewhere durable from that worker.

With the ``pipeline`` and ``deployment`` options (what ``onceflow.spark.batch_job``
passes) ``record_vote`` records the vote in the pipeline's ledger through the
coordinator, which refuses a zombie attempt's vote. Without them, it writes
the vote as JSON to the ``vote_path`` option (create-if-absent): for using
the data source on its own, outside a pipeline.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..storage import storage_for
from ..protocol.batch_id import BatchId
from ..protocol.participant import Vote

VOTE_PATH_OPTION = "vote_path"


def vote_to_dict(vote: Vote) -> dict[str, Any]:
    return {"participant": vote.participant, "batch_seq": vote.batch_seq, "attempt": vote.attempt,
            "records": vote.records, "payload": dict(vote.payload)}


def vote_from_dict(raw: Mapping[str, Any]) -> Vote:
    return Vote(str(raw["participant"]), int(raw["batch_seq"]), int(raw["attempt"]),
                dict(raw["payload"]), int(raw["records"]))


def record_vote(options: Mapping[str, str], vote: Vote) -> None:
    """Make ``vote`` durable. Runs in the Python worker of the data source's commit.

    With ``pipeline`` and ``deployment`` options (what ``onceflow.spark.batch_job`` passes) the vote
    goes to the pipeline's ledger; otherwise to the ``vote_path`` option.
    Refuses to overwrite a recorded vote: one batch attempt votes once."""
    if options.get("pipeline") and options.get("deployment"):
        from .ledger_votes import record_vote_in_ledger

        record_vote_in_ledger(options["pipeline"], options["deployment"], vote)
        return
    path = options.get(VOTE_PATH_OPTION)
    if not path:
        raise ValueError(f"writer option {VOTE_PATH_OPTION!r} is not set: the job has nowhere to record the vote "
                         f"of batch {BatchId(vote.batch_seq)} attempt {vote.attempt}; pass .option('{VOTE_PATH_OPTION}', uri)")
    data = json.dumps(vote_to_dict(vote), sort_keys=True).encode()
    if not storage_for(path, options=options).create_if_absent(path, data):
        raise FileExistsError(f"a vote of {vote.participant} for batch {BatchId(vote.batch_seq)} attempt {vote.attempt} "
                              f"is already recorded at {path}; a batch attempt votes once: run a new attempt")


def read_recorded_vote(path: str, options: Mapping[str, str] | None = None) -> Vote | None:
    data = storage_for(path, options=options).read_bytes(path)
    return None if data is None else vote_from_dict(json.loads(data))
