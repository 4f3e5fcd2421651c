"""The example transform on real Spark: every record lands in exactly one of
enriched / dead letter, with the reason the generator says it must get, and
the per-page minute counts match an independent count in Python."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onceflow_examples.clickstream import CLICKSTREAM, transform
from onceflow_examples.clickstream_data import ClickRecord, as_kafka_records, generate

BATCH = "0000000042"


def run(spark, records: list[ClickRecord], partitions: int = 2) -> dict[str, list]:
    df = spark.createDataFrame(as_kafka_records(records, partitions=partitions))
    return {name: out.collect() for name, out in transform(df, BATCH).items()}


@pytest.fixture(scope="module")
def sample():
    return generate(3000, seed=7, malformed_ratio=0.2)


@pytest.fixture(scope="module")
def outputs(spark, sample):
    return run(spark, sample)


def test_every_record_lands_in_exactly_one_kafka_output_with_the_right_reason(sample, outputs):
    by_offset = {}
    for i, record in enumerate(sample):  # as_kafka_records: round-robin over 2 partitions
        by_offset[(i % 2, i // 2)] = record

    enriched = [json.loads(r.value) for r in outputs["clicks_enriched"]]
    dead = [json.loads(r.value) for r in outputs["clicks_dead_letter"]]
    seen = Counter((e["source"]["partition"], e["source"]["offset"]) for e in enriched)
    seen.update((d["partition"], d["offset"]) for d in dead)
    assert seen == Counter(by_offset.keys())  # nothing dropped, nothing twice

    expected_reasons = Counter(r.reason for r in sample if r.reason)
    assert len(expected_reasons) >= 8  # the sample really exercises the malformed kinds
    assert Counter(d["reason"] for d in dead) == expected_reasons
    for d in dead:
        record = by_offset[(d["partition"], d["offset"])]
        assert d["reason"] == record.reason
        assert d["topic"] == "clicks" and d["batch_id"] == BATCH
        if record.value is not None:
            import base64

            assert base64.b64decode(d["payload_base64"]) == record.value


def test_enriched_events_are_keyed_by_event_id_and_carry_window_and_batch(sample, outputs):
    valid = {json.loads(r.value)["event_id"]: json.loads(r.value) for r in sample if r.reason is None}
    rows = outputs["clicks_enriched"]
    assert len(rows) == len(valid)
    for row in rows:
        event = json.loads(row.value)
        assert bytes(row.key).decode() == event["event_id"]
        original = valid[event["event_id"]]
        assert {k: event[k] for k in original} == original
        assert event["window_start"] == original["ts"] - original["ts"] % 60_000
        assert event["batch_id"] == BATCH


def test_page_minute_counts_match_an_independent_count(sample, outputs):
    expected_views: Counter = Counter()
    expected_sum: defaultdict = defaultdict(float)
    for r in sample:
        if r.reason is None:
            e = json.loads(r.value)
            key = (e["page"], e["ts"] - e["ts"] % 60_000)
            expected_views[key] += 1
            expected_sum[key] += e["amount"]
    rows = outputs["page_minute_counts"]
    got = {(r.page, int(r.window_start.timestamp() * 1000)): r for r in rows}
    assert {k: r.views for k, r in got.items()} == dict(expected_views)
    for key, row in got.items():
        assert row.amount_sum == pytest.approx(expected_sum[key])
        assert row.batch_id == BATCH


def test_the_example_pipeline_declares_exactly_the_transform_outputs(outputs):
    spec = CLICKSTREAM
    assert spec.transform_function() is transform
    assert sorted(s.name for s in spec.sinks) == sorted(outputs)
    assert spec.sink("page_minute_counts").target == "clickstream/page_minute_counts"
    assert {s.kind for s in spec.sinks} == {"files", "iceberg", "kafka"}
    table = spec.sink("page_minute_table")
    assert (table.target, table.partition_by) == ("clickstream.page_minute_counts", ("day(window_start)",))
    assert outputs["page_minute_table"] == outputs["page_minute_counts"]  # the same rows, as a table


def test_generator_is_deterministic_by_seed():
    assert generate(200, seed=3) == generate(200, seed=3)
    assert generate(200, seed=3) != generate(200, seed=4)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
event_like = st.fixed_dictionaries(
    {}, optional={f: json_values for f in ("event_id", "user_id", "page", "ts", "amount")}
).map(lambda d: json.dumps(d).encode())
payloads = st.one_of(st.none(), st.binary(max_size=40), json_values.map(lambda v: json.dumps(v).encode()), event_like)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(payloads, min_size=1, max_size=40))
def test_arbitrary_payloads_are_never_dropped_nor_fail_the_job(spark, values):
    records = [ClickRecord(b"k", v, None) for v in values]
    out = run(spark, records, partitions=1)
    offsets = [json.loads(r.value)["source"]["offset"] for r in out["clicks_enriched"]]
    offsets += [json.loads(r.value)["offset"] for r in out["clicks_dead_letter"]]
    assert sorted(offsets) == list(range(len(values)))
    assert sum(r.views for r in out["page_minute_counts"]) == len(out["clicks_enriched"])


def test_produce_counts_only_what_the_broker_took(one_kafka_broker):
    # The upstream of the demo, the tests and the chaos runs: a record the broker refused (here a partition
    # the topic does not have) once counted as produced, and a chaos run reported it "missing".
    from onceflow_examples.clickstream_data import NotDelivered, produce
    from tests.integration.kafka.helpers import create_topic

    config = {**one_kafka_broker.config(), "message.timeout.ms": 5000}
    topic = create_topic(config, partitions=2, prefix="upstream")
    assert produce(config, topic, generate(10, seed=1)) == 10
    with pytest.raises(NotDelivered, match="3 record\\(s\\) not delivered") as refused:
        produce(config, topic, generate(3, seed=2), partition=7)
    assert refused.value.delivered == 0
