"""PipelineSpec checks its settings when it is built (pure logic)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.config.settings import ConfigurationError
from onceflow.pipeline.spec import PipelineSpec, SinkSpec
from onceflow.sources.kafka.columns import INPUT_COLUMNS

from tests.doubles.specs import ORDERS


def test_input_columns_are_kept_in_input_order_and_survive_the_trip_to_spark():
    spec = dataclasses.replace(ORDERS, input_columns=["offset", " value", "key"])
    assert spec.input_columns == ("key", "value", "offset")
    assert PipelineSpec.from_json(spec.to_json()) == spec
    everything = dataclasses.replace(ORDERS, input_columns=None)
    assert PipelineSpec.from_json(everything.to_json()).input_columns is None


@pytest.mark.parametrize("columns, named", [(("value", "hedaers"), "['hedaers']"), ((), "[]")])
def test_unknown_or_no_input_columns_fail_naming_the_setting_and_the_choices(columns, named):
    with pytest.raises(ConfigurationError) as error:
        dataclasses.replace(ORDERS, input_columns=columns)
    assert str(error.value) == (
        f"pipeline 'orders': input_columns: {named} is not valid: name one or more of {', '.join(INPUT_COLUMNS)}"
    )



def test_dotted_names_that_could_share_transactional_ids_are_refused_when_the_spec_is_written():
    """Pipeline ``a.b`` with sink ``c`` and pipeline ``a`` with sink ``b.c`` would both derive
    ``onceflow.a.b.c.0`` and fence each other: the spec refuses the dot, as the ids do."""
    from onceflow.sinks.kafka.ids import transactional_id
    from onceflow.pipeline.spec import KAFKA, PipelineSpec, SinkSpec

    with pytest.raises(ConfigurationError, match="sink name 'b.c' is not valid: use 1-100 characters"):
        SinkSpec("b.c", KAFKA, "topic")
    with pytest.raises(ConfigurationError, match="pipeline name 'a.b' is not valid"):
        PipelineSpec("a.b", ("in",), "m:f", (SinkSpec("c", KAFKA, "topic"),))
    with pytest.raises(ValueError, match="cannot form a transactional.id"):
        transactional_id("a.b", "c", 0)


@pytest.mark.parametrize("name", ["", "-leading-dash", "x" * 101, "with space", "a/b"])
def test_other_bad_names_are_refused_naming_the_rule(name):
    from onceflow.pipeline.spec import FILES, SinkSpec

    with pytest.raises(ConfigurationError, match="starting with a letter or digit"):
        SinkSpec(name, FILES, "target")


@pytest.mark.parametrize("field,value,named", [
    ("batches", "daily", r"batches='daily' is not valid: use 'offsets' .* or 'interval'"),
    ("interval_grace_s", -1, "interval_grace_s must be >= 0"),
    ("batches_in_flight", 0, "batches_in_flight must be >= 1"),
    ("records_per_split", 0, r"records_per_split must be >= 1, or None for always the sinks' splits"),
    ("batches", "interval", r"max_records_per_partition=100000 does not apply to batches='interval'.*set max_records_per_partition=None"),
])
def test_how_runs_map_to_batches_is_checked_when_the_spec_is_written(field, value, named):
    with pytest.raises(ConfigurationError, match=named):
        dataclasses.replace(ORDERS, **{field: value})
    hourly = dataclasses.replace(ORDERS, batches="interval", max_records_per_partition=None)
    assert PipelineSpec.from_json(hourly.to_json()).batches == "interval"


_words = st.one_of(st.text(max_size=120), st.sampled_from(["", "a.b", "-x", "clicks", "Ünïcode", "x" * 101]))
_counts = st.integers(-5, 10**12)


@settings(max_examples=400, deadline=None)
@given(name=_words, topic=_words, transform=_words, sink=_words, kind=st.sampled_from(["files", "kafka", "iceberg", "zip"]),
       target=_words, splits=_counts, max_records=st.none() | _counts, grace=_counts, in_flight=_counts,
       batches=st.sampled_from(["offsets", "interval", "hourly"]),
       run_params=st.dictionaries(_words, st.one_of(st.integers(), st.fixed_dictionaries({"default": st.integers()})),
                                  max_size=2))
def test_any_spec_field_value_builds_a_spec_or_is_refused_naming_the_field(
        name, topic, transform, sink, kind, target, splits, max_records, grace, in_flight, batches, run_params):
    """A spec of the right types and any values: built, or refused with a ConfigurationError that
    names the pipeline or the sink, never another error later."""
    try:
        PipelineSpec(name, (topic,), transform, (SinkSpec(sink, kind, target, splits=splits),),
                     max_records_per_partition=max_records, interval_grace_s=grace, batches_in_flight=in_flight,
                     batches=batches, run_params=run_params)
    except ConfigurationError as refused:
        assert str(refused).startswith(("pipeline ", "sink ")), refused


@pytest.mark.parametrize("kind, target, setting", [
    ("files", "out/path", {"catalog": "lake"}),
    ("files", "out/path", {"republish": True}),
    ("kafka", "topic", {"partition_by": ("day(ts)",)}),
    ("iceberg", "ns.t", {"transaction_timeout_ms": 60_000}),
])
def test_a_setting_of_another_kind_is_refused_not_ignored(kind, target, setting):
    (name,) = setting
    with pytest.raises(ConfigurationError, match=f"sink 'out': {name} is not a setting of a {kind} sink"):
        SinkSpec("out", kind, target, **setting)
