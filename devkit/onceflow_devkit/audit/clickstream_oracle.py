"""Which click records are valid, decided again in plain Python.

The audit must not trust the Spark transform it checks, so validity is
re-derived here from the rules in ``onceflow_examples.clickstream``'s
docstring, with the standard ``json`` module: a record is malformed when its
value is not JSON, not an object, misses a field (or holds null), has a field
of the wrong JSON type (strings for ``event_id``/``user_id``/``page``, a
64-bit integer for ``ts``, any number for ``amount``), or has ``ts`` outside
0..9999-12-31. Where the two disagree, the audit reports a mismatch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

STRING_FIELDS = ("event_id", "user_id", "page")
FIELDS = ("event_id", "user_id", "page", "ts", "amount")
MAX_TS_MS = 253402300799999
INT64_MAX = 2**63 - 1
WINDOW_MS = 60_000


@dataclass(frozen=True)
class Verdict:
    valid: bool
    reason: str | None
    event: dict | None


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def classify(value: bytes | None) -> Verdict:
    try:
        doc = json.loads(value.decode("utf-8"), parse_constant=_reject_constant) if value is not None else None
    except (ValueError, UnicodeDecodeError):
        return Verdict(False, "bad_json", None)
    if value is None:
        return Verdict(False, "bad_json", None)
    if not isinstance(doc, dict):
        return Verdict(False, "not_a_json_object", None)
    for name in FIELDS:
        field = doc.get(name)
        if field is None:
            return Verdict(False, f"missing_field:{name}", None)
        if name in STRING_FIELDS:
            ok = isinstance(field, str)
        elif name == "ts":
            ok = isinstance(field, int) and not isinstance(field, bool) and -INT64_MAX - 1 <= field <= INT64_MAX
        else:
            ok = isinstance(field, (int, float)) and not isinstance(field, bool)
        if not ok:
            return Verdict(False, f"wrong_type:{name}", None)
    if not 0 <= doc["ts"] <= MAX_TS_MS:
        return Verdict(False, "out_of_range:ts", None)
    return Verdict(True, None, {name: doc[name] for name in FIELDS})


def window_start_ms(ts_ms: int) -> int:
    return ts_ms - ts_ms % WINDOW_MS
