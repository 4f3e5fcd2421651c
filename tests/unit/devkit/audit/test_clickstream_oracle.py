"""The audit's Python oracle and the Spark transform agree on every record.

They are written independently; this is what lets the audit judge the
transform's output rather than repeat it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from onceflow_devkit.audit import clickstream_oracle as oracle
from onceflow_examples import clickstream
from onceflow_examples.clickstream_data import generate


def test_oracle_gives_every_generated_record_the_reason_the_generator_intended():
    records = generate(2000, seed=7, malformed_ratio=0.2)
    assert any(r.reason for r in records) and any(r.reason is None for r in records)
    for r in records:
        assert oracle.classify(r.value).reason == r.reason, r.value


@pytest.mark.parametrize(
    "value, reason",
    [
        (b"{not json", "bad_json"),
        (b"NaN", "bad_json"),
        (b"[1, 2]", "not_a_json_object"),
        (b'{"event_id": "e", "user_id": "u", "page": "/", "ts": 1}', "missing_field:amount"),
        (b'{"event_id": null, "user_id": "u", "page": "/", "ts": 1, "amount": 1}', "missing_field:event_id"),
        (b'{"event_id": "e", "user_id": "u", "page": "/", "ts": 1.5, "amount": 1}', "wrong_type:ts"),
        (b'{"event_id": "e", "user_id": "u", "page": "/", "ts": true, "amount": 1}', "wrong_type:ts"),
        (b'{"event_id": "e", "user_id": "u", "page": "/", "ts": 1, "amount": "3"}', "wrong_type:amount"),
        (b'{"event_id": 5, "user_id": "u", "page": "/", "ts": 1, "amount": 1}', "wrong_type:event_id"),
        (b'{"event_id": "e", "user_id": "u", "page": "/", "ts": -1, "amount": 1}', "out_of_range:ts"),
        (b'{"event_id": "e", "user_id": "u", "page": "/", "ts": 60001, "amount": 2.5}', None),
    ],
)
def test_oracle_reasons(value, reason):
    assert oracle.classify(value).reason == reason


_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3))


@settings(max_examples=1, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(clickstream.FIELDS + ("x",)), _scalar, max_size=6), min_size=150, max_size=150))
def test_spark_transform_and_oracle_classify_identically(spark, docs):
    values = [json.dumps(d).encode() for d in docs] + [r.value for r in generate(300, seed=3, malformed_ratio=0.3)]
    rows = [(None, v, "clicks", 0, i) for i, v in enumerate(values)]
    df = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")
    got = {r["offset"]: r["reason"] for r in clickstream.classify(df).select("offset", "reason").collect()}
    want = {i: oracle.classify(v).reason for i, v in enumerate(values)}
    disagreements = {i: (values[i], got[i], want[i]) for i in want if got[i] != want[i]}
    assert not disagreements
