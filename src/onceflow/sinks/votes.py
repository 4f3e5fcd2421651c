"""Where a sink's Spark data source hands its vote over: ONE route, ``record_vote``, for every kind.

The data source's ``commit(messages)`` runs in a Python worker, not in the
driver's process (docs/protocol.md, "One batch"), so the vote cannot travel back through
driver memory: it must be written somewhere durable from that worker.

With the ``pipeline`` and ``deployment`` options (what ``onceflow.spark.batch_job``
passes every kind) ``record_vote`` records the vote in the pipeline's ledger
(``onceflow.core.coordinator.write_vote``), which refuses a zombie attempt's vote. Without them,
it writes the vote as JSON to the ``vote_path`` option (create-if-absent): for
using a data source on its own, outside a pipeline.

Every kind's vote payload names its version (``PayloadFormat``): a reader
upgrades an older payload through named functions, one version at a time
(payloads written before versions are version 1), and refuses a newer one by
name (``NewerPayload``), as the ledger refuses a newer format rather than
misread it. Flink's ``KafkaCommittableSerializer`` does the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from onceflow.storage import storage_for
from onceflow.core.batch_id import BatchId
from onceflow.core.participant import Vote
from onceflow.config.deployment import Deployment
from onceflow.core.batch_view import LedgerView
from onceflow.core.coordinator import write_vote
from onceflow.core.ledger.storage import deployment_ledger_storage

VOTE_PATH_OPTION = "vote_path"
# The key of a vote payload that names its version; a payload without it is version 1.
PAYLOAD_VERSION = "payload_version"


class UnreadablePayload(ValueError):
    """A vote payload this onceflow cannot read as it was written: refused, never misread."""


class NewerPayload(UnreadablePayload):
    """A vote payload of a version newer than this onceflow reads."""


@dataclass(frozen=True)
class PayloadFormat:
    """The versions of one sink kind's vote payload: ``version``, the newest this onceflow writes and
    reads, and ``upgrades``, from each older version n the named function that makes it version n + 1."""

    kind: str
    version: int
    upgrades: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [v for v in range(1, self.version) if v not in self.upgrades]
        if missing:
            raise ValueError(f"{self.kind} vote payload version {self.version} has no upgrade from version(s) {missing}")

    def write(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """``payload`` as this onceflow writes it: with its version."""
        return {**payload, PAYLOAD_VERSION: self.version}

    def read(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """``payload`` as version ``version``: an older one upgraded, a newer one refused (``NewerPayload``).
        Payloads are read where they are used (a participant's call, the UI): an older onceflow's vote in the
        ledger stays as it was written."""
        found = payload.get(PAYLOAD_VERSION, 1)
        if not isinstance(found, int) or found < 1:
            raise UnreadablePayload(f"a {self.kind} vote payload names version {found!r}, which no onceflow writes: "
                               "the vote was changed; abort the batch and re-run it")
        if found > self.version:
            raise NewerPayload(
                f"a {self.kind} vote payload of version {found}, newer than this onceflow reads (at most version "
                f"{self.version}): upgrade onceflow on every Airflow worker of this pipeline to the version that "
                "wrote the vote, or a later one")
        upgraded = dict(payload)
        for version in range(found, self.version):
            upgraded = self.upgrades[version](upgraded)
        upgraded[PAYLOAD_VERSION] = self.version
        return upgraded


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
    options; no spec, runtime, participant or coordinator is built."""
    write_vote(LedgerView(deployment_ledger_storage(Deployment.from_option(deployment_option)), pipeline), vote)


def read_recorded_vote(path: str, options: Mapping[str, str] | None = None) -> Vote | None:
    """The vote ``record_vote`` wrote to ``path`` (the ``vote_path`` route), or None."""
    data = storage_for(path, options=options).read_bytes(path)
    return None if data is None else Vote.from_dict(json.loads(data))
