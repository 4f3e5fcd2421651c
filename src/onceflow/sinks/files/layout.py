"""Where a file sink's files live: the one place that spells the layout.

::

    <sink>/_staging/<batch_id>/<attempt>/part-<split>-<uuid>.parquet   pre-committed, invisible
    <sink>/batch=<batch_id>/part-<split>-<uuid>.parquet                promoted
    <sink>/batch=<batch_id>/_SUCCESS                                   manifest, written LAST

A batch is committed if and only if its ``_SUCCESS`` manifest exists; readers
list manifests, never bare directories, and ignore every name that starts
with ``_`` (Spark and Hive do the same, so ``spark.read.parquet(<sink>)``
never sees staging). The ``batch=`` directory doubles as a Hive-style
partition column, so a plain Spark read can tell batches apart.

Pure string functions: runs anywhere (driver, executor, Airflow worker).
"""

from __future__ import annotations

import uuid

from onceflow.core.batch_id import BatchId
from onceflow.storage.base import join  # noqa: F401  (layout.join is how this package spells paths)

STAGING_DIR = "_staging"
MANIFEST_NAME = "_SUCCESS"
BATCH_DIR_PREFIX = "batch="


def batch_id(batch_seq: int) -> str:
    """The batch's id as directory name; the same spelling as ``Plan.batch_id``."""
    return str(BatchId(batch_seq))


def batch_staging(sink_uri: str, batch_seq: int) -> str:
    """Every attempt of one batch stages below this prefix; abort deletes it whole."""
    return join(sink_uri, STAGING_DIR, batch_id(batch_seq))


def attempt_staging(sink_uri: str, batch_seq: int, attempt: int) -> str:
    return join(batch_staging(sink_uri, batch_seq), str(attempt))


def batch_dir(sink_uri: str, batch_seq: int) -> str:
    return join(sink_uri, BATCH_DIR_PREFIX + batch_id(batch_seq))


def manifest_path(sink_uri: str, batch_seq: int) -> str:
    return join(batch_dir(sink_uri, batch_seq), MANIFEST_NAME)


def part_name(split: int) -> str:
    """A fresh file name for one task attempt of one split.

    The uuid keeps a retried or speculative attempt from overwriting the file
    of another attempt of the same split: which one counts is decided by the
    vote alone, never by whichever attempt wrote last.
    """
    return f"part-{split:05d}-{uuid.uuid4().hex}.parquet"


def seq_of_batch_dir(name: str) -> int | None:
    """``batch=0000000007`` -> 7; anything else (``_staging``, stray names) -> None."""
    if not name.startswith(BATCH_DIR_PREFIX):
        return None
    digits = name[len(BATCH_DIR_PREFIX):]
    return int(digits) if digits.isdigit() else None
