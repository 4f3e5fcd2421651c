"""Ledger records as onceflow wrote them in ledger format 1, before a plan's facts
were typed: the planner merged a run's conf into the plan's ``params``, and the file
and Iceberg kinds kept the batch a vote replaces in its payload."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

from onceflow.core.ledger.records import Kind, _canonical
from onceflow.core.plan import Plan


def format1(kind: Kind, body: Mapping[str, Any]) -> bytes:
    envelope = {"format": 1, "kind": kind.value, "writer": "onceflow 0.1.0",
                "sha256": hashlib.sha256(_canonical(body)).hexdigest(), "body": dict(body)}
    return (json.dumps(envelope, sort_keys=True, indent=1) + "\n").encode()


def plan_body(plan: Plan, params: Mapping[str, Any]) -> dict[str, Any]:
    """``plan`` as format 1 stored it, with ``params`` as its parameters."""
    body = plan.to_dict()
    del body["facts"], body["transform_params"]
    return {**body, "params": dict(params)}


def write_plan(ledger, plan: Plan, params: Mapping[str, Any], *, overwrite: bool = False) -> None:
    """Store ``plan`` in format 1 (``overwrite``: in place of the plan written now)."""
    data = format1(Kind.PLAN, plan_body(plan, params))
    key = ledger.plan_key(plan.batch_seq)
    if overwrite:
        ledger.storage.overwrite(key, data)
    else:
        assert ledger.storage.create(key, data), f"{key} exists"
