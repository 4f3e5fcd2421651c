"""Test doubles for pure protocol logic: an offset source and participants.

``WorldParticipant`` keeps its effects in memory (one process); the
``DirParticipant`` keeps them in a directory so several OS processes (race
and crash tests) share them. Both honour the participant contract: commit
and abort idempotent, ALREADY_DONE on repeats; and both refuse what the
protocol must never ask (committing an unstaged or second vote, aborting a
committed batch) with FAILED, so a coordinator bug shows up as a failure.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from onceflow.core.participant import Outcome, Participant, Result, Vote
from onceflow.core.plan import Plan
from onceflow.core.planning.source import TopicPartition

DONE, ALREADY, RETRY, FAILED = (Result(Outcome.DONE), Result(Outcome.ALREADY_DONE), Result(Outcome.RETRY_LATER, "flaky"), Result(Outcome.FAILED, "broken"))


@dataclass
class FakeSource:
    """Partitions with [earliest, lso); record timestamps are 1000 + 10 * offset."""

    logs: dict[TopicPartition, list[int]] = field(default_factory=dict)

    def add(self, topic: str, partition: int, end: int, earliest: int = 0) -> None:
        self.logs[TopicPartition(topic, partition)] = [earliest, end]

    def produce(self, topic: str, partition: int, n: int) -> None:
        self.logs[TopicPartition(topic, partition)][1] += n

    def partitions(self, topics: Sequence[str]) -> list[TopicPartition]:
        unknown = set(topics) - {tp.topic for tp in self.logs}
        if unknown:
            raise KeyError(f"unknown topics {sorted(unknown)}")
        return sorted(tp for tp in self.logs if tp.topic in topics)

    ids: dict[str, str] = field(default_factory=dict)  # topic ids, where the "broker" reports them

    def topic_ids(self, topics):
        return {t: self.ids[t] for t in topics if t in self.ids}

    def earliest_offsets(self, partitions):
        return {tp: self.logs[tp][0] for tp in partitions}

    def last_stable_offsets(self, partitions):
        return {tp: self.logs[tp][1] for tp in partitions}

    def offsets_for_timestamp(self, partitions, timestamp_ms):
        out = {}
        for tp in partitions:
            earliest, end = self.logs[tp]
            out[tp] = min(end, max(earliest, -(-(timestamp_ms - 1000) // 10)))
        return out


def ranges_payload(plan: Plan) -> list[list]:
    return [[r.topic, r.partition, r.start, r.end] for r in plan.ranges]


@dataclass
class World:
    """Everything the in-memory participants did, for invariant checks."""

    staged: set[tuple[str, int, int]] = field(default_factory=set)
    visible: dict[tuple[str, int], Vote] = field(default_factory=dict)
    aborted: set[tuple[str, int]] = field(default_factory=set)
    refused: list[str] = field(default_factory=list)  # FAILED answers to protocol violations


class WorldParticipant(Participant):
    def __init__(self, name: str, world: World):
        self.name = name
        self.world = world
        self.verify_answer: Result | None = None  # force an answer (None: check staging)
        self.commit_answer: Result | None = None
        self.abort_answer: Result | None = None

    def prepare(self, plan: Plan, attempt: int) -> Vote:
        """Test stand-in for the Spark side: stage output, return the vote."""
        self.world.staged.add((self.name, plan.batch_seq, attempt))
        payload = {"ranges": ranges_payload(plan), "token": uuid.uuid4().hex}
        return Vote(self.name, plan.batch_seq, attempt, payload, plan.records)

    def verify(self, vote: Vote) -> Result:
        if self.verify_answer is not None:
            return self.verify_answer
        return DONE if (self.name, vote.batch_seq, vote.attempt) in self.world.staged else FAILED

    def commit(self, vote: Vote) -> Result:
        if self.commit_answer is not None:
            return self.commit_answer
        key = (self.name, vote.batch_seq)
        if key in self.world.visible:
            if self.world.visible[key] == vote:
                return ALREADY
            self.world.refused.append(f"second vote committed for {key}")
            return FAILED
        if (self.name, vote.batch_seq, vote.attempt) not in self.world.staged:
            self.world.refused.append(f"commit of unstaged {key} attempt {vote.attempt}")
            return FAILED
        self.world.visible[key] = vote
        if vote.replaces is not None:  # as the file kind does: the replaced batch's output goes
            self.world.visible.pop((self.name, vote.replaces), None)
        return DONE

    def abort(self, plan: Plan, votes: Sequence[Vote]) -> Result:
        if self.abort_answer is not None:
            return self.abort_answer
        key = (self.name, plan.batch_seq)
        if key in self.world.visible:
            self.world.refused.append(f"abort of committed {key}")
            return FAILED
        self.world.staged = {s for s in self.world.staged if s[:2] != key}
        if key in self.world.aborted:
            return ALREADY
        self.world.aborted.add(key)
        return DONE


class DirParticipant(Participant):
    """Effects as files under ``root``: staged/<name>/<seq>-<attempt>.json,
    visible/<name>/<seq>.json (a committed vote), aborted/<name>/<seq>."""

    def __init__(self, name: str, root: str | os.PathLike[str]):
        self.name = name
        self.root = Path(root)
        for sub in ("staged", "visible", "aborted", "refused"):
            (self.root / sub / name).mkdir(parents=True, exist_ok=True)

    def _visible(self, seq: int) -> Path:
        return self.root / "visible" / self.name / f"{seq}.json"

    def _refuse(self, why: str) -> Result:
        (self.root / "refused" / self.name / uuid.uuid4().hex).write_text(why)
        return FAILED

    def prepare(self, plan: Plan, attempt: int) -> Vote:
        vote = Vote(self.name, plan.batch_seq, attempt, {"ranges": ranges_payload(plan)}, plan.records)
        (self.root / "staged" / self.name / f"{plan.batch_seq}-{attempt}.json").write_text(json.dumps(vote.to_dict()))
        return vote

    def verify(self, vote: Vote) -> Result:
        return DONE if (self.root / "staged" / self.name / f"{vote.batch_seq}-{vote.attempt}.json").exists() else FAILED

    def commit(self, vote: Vote) -> Result:
        target = self._visible(vote.batch_seq)
        staged = self.root / "staged" / self.name / f"{vote.batch_seq}-{vote.attempt}.json"
        if target.exists():
            return ALREADY if json.loads(target.read_text()) == vote.to_dict() else self._refuse(f"second vote {vote}")
        if (self.root / "aborted" / self.name / str(vote.batch_seq)).exists():
            return self._refuse(f"commit after abort {vote}")
        try:
            os.link(staged, target)
        except FileExistsError:
            return self.commit(vote)
        except FileNotFoundError:
            return self._refuse(f"commit of unstaged {vote}")
        return DONE

    def abort(self, plan: Plan, votes: Sequence[Vote]) -> Result:
        if self._visible(plan.batch_seq).exists():
            return self._refuse(f"abort of committed batch {plan.batch_seq}")
        marker = self.root / "aborted" / self.name / str(plan.batch_seq)
        existed = marker.exists()
        marker.touch()
        return ALREADY if existed else DONE

    def refused(self) -> list[str]:
        return [p.read_text() for p in (self.root / "refused" / self.name).iterdir()]


def participants(kind: str, world_or_root, names: Sequence[str] = ("files", "events")) -> Mapping[str, object]:
    cls = WorldParticipant if kind == "world" else DirParticipant
    return {n: cls(n, world_or_root) for n in names}
