"""The ids of the prepared transactions a batch may leave behind, derived from the plan alone.

``onceflow:<pipeline>:<sink>:b<batch>:s<split>:a<attempt>.<task attempt>``: a
rollback finds every attempt's, voted or not, by the batch's prefix; a Spark
task retried within an attempt gets an id of its own, so it never collides
with the transaction of the task attempt it replaces. PostgreSQL takes ids
under 200 bytes: long names are hashed.
"""

from __future__ import annotations

import hashlib
import re

MAX_BYTES = 199
_OWNER_BYTES = 120  # what is left leaves room for the batch, split and attempts
_ATTEMPT = re.compile(r":a(\d+)\.(\d+)$")


def owner(pipeline: str, sink: str) -> str:
    plain = f"onceflow:{pipeline}:{sink}"
    if len(plain.encode()) <= _OWNER_BYTES:
        return plain
    return "onceflow:" + hashlib.sha256(f"{pipeline}\0{sink}".encode()).hexdigest()[:40]


def batch_prefix(pipeline: str, sink: str, batch_seq: int) -> str:
    return f"{owner(pipeline, sink)}:b{batch_seq}:"


def split_prefix(pipeline: str, sink: str, batch_seq: int, split: int) -> str:
    return f"{batch_prefix(pipeline, sink, batch_seq)}s{split}:"


def gid(pipeline: str, sink: str, batch_seq: int, split: int, attempt: int, task_attempt: int) -> str:
    value = f"{split_prefix(pipeline, sink, batch_seq, split)}a{attempt}.{task_attempt}"
    assert len(value.encode()) <= MAX_BYTES, value
    return value


def attempt_of(value: str) -> tuple[int, int] | None:
    """(attempt, task attempt) of a gid made by ``gid``; None for another's."""
    match = _ATTEMPT.search(value)
    return (int(match[1]), int(match[2])) if match else None
