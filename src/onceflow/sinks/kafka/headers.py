"""Which split wrote a record: the headers onceflow puts first on every record it produces.

Pure logic, used wherever records are written or told apart (split writers
on executors, the commit's visibility check and repair on Airflow workers,
the audit). They let the commit count one split's records and find an
already published repair, even in a topic that other pipelines, or other
sinks of this one, write with the same batch ids; the audit attributes
every record to its batch by them.

Records carry one of three formats; a vote names the one its split wrote
(``TxnHandle.record_format``; a vote from before that field names it once
upgraded: ``handle.handles_name_their_formats``), so a batch pre-committed by
an older onceflow is still committed, verified and repaired by its own headers:

| format | headers, in order | bytes a record |
| --- | --- | --- |
| 1 | ``onceflow.batch`` = batch id, ``onceflow.split`` = split | ~40 |
| 2 | format 1, then ``onceflow.txn`` = the split's transactional id | ~90 |
| 3 | ``onceflow`` = ``<batch id>/<split>/<writer>`` | ~37 |

``<writer>`` is 16 hex digits of the SHA-256 of the split's transactional
id, which names the pipeline and the sink (``ids.transactional_id``): 64
bits tell writers apart as the whole id did, at 50 fewer bytes a record.
A repair's records add ``onceflow.repair`` = ``1`` after them. User headers
follow.

A batch pre-committed in format 3 must be committed by this onceflow or a
later one: an earlier one would look for format 2 and not find its records.
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

CURRENT_FORMAT = 3
HEADER = "onceflow"
BATCH_HEADER = "onceflow.batch"
SPLIT_HEADER = "onceflow.split"
TXN_HEADER = "onceflow.txn"
REPAIR_HEADER = "onceflow.repair"
REPAIR = (REPAIR_HEADER, b"1")
SEPARATOR = "/"
PARTS = 3  # of the format 3 value: batch id, split, writer
WRITER_DIGITS = 16

Headers = list[tuple[str, bytes]]


def writer_tag(transactional_id: str) -> str:
    return hashlib.sha256(transactional_id.encode()).hexdigest()[:WRITER_DIGITS]


def _format_1(batch_id: str, split: int, transactional_id: str) -> Headers:
    return [(BATCH_HEADER, batch_id.encode()), (SPLIT_HEADER, str(split).encode())]


def _format_2(batch_id: str, split: int, transactional_id: str) -> Headers:
    return _format_1(batch_id, split, transactional_id) + [(TXN_HEADER, transactional_id.encode())]


def _format_3(batch_id: str, split: int, transactional_id: str) -> Headers:
    return [(HEADER, SEPARATOR.join((batch_id, str(split), writer_tag(transactional_id))).encode())]


FORMATS = {1: _format_1, 2: _format_2, 3: _format_3}


def record_headers(batch_id: str, split: int, transactional_id: str, record_format: int = CURRENT_FORMAT) -> Headers:
    """The headers split ``split`` of ``batch_id``, writing as ``transactional_id``, puts first on each record."""
    try:
        return FORMATS[record_format](batch_id, split, transactional_id)
    except KeyError:
        raise ValueError(f"record format {record_format} is unknown to this onceflow (it knows {sorted(FORMATS)}): "
                         "commit this batch with the onceflow version that pre-committed it, or a later one") from None


def batch_and_split(headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None) -> tuple[str, str] | None:
    """(batch id, split) of a record written by onceflow in any format; None for any other record."""
    found = dict(headers or ())
    ours = (found.get(HEADER) or b"").decode(errors="replace").split(SEPARATOR)
    if len(ours) == PARTS:
        return ours[0], ours[1]
    if found.get(BATCH_HEADER) is not None and found.get(SPLIT_HEADER) is not None:
        return found[BATCH_HEADER].decode(), found[SPLIT_HEADER].decode()
    return None


def sql_batch_and_split(headers_column: str) -> tuple[str, str]:
    """Spark SQL expressions for a record's batch id and split (strings; NULL for records not
    onceflow's), over an array<struct<key string, value binary>> column of headers."""

    def value(key: str) -> str:
        return f"cast(try_element_at(filter({headers_column}, h -> h.key = '{key}'), 1).value as string)"

    ours = f"split({value(HEADER)}, '{SEPARATOR}')"
    return tuple(  # type: ignore[return-value]
        f"coalesce(CASE WHEN size({ours}) = {PARTS} THEN {ours}[{i}] END, {value(old)})"
        for i, old in enumerate((BATCH_HEADER, SPLIT_HEADER))
    )
