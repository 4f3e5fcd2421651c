"""PipelineSpec checks its settings when it is built (pure logic)."""

from __future__ import annotations

import dataclasses

import pytest

from onceflow_examples.clickstream import CLICKSTREAM
from onceflow.settings import ConfigurationError
from onceflow.spec import INPUT_COLUMNS, PipelineSpec


def test_input_columns_are_kept_in_input_order_and_survive_the_trip_to_spark():
    spec = dataclasses.replace(CLICKSTREAM, input_columns=["offset", " value", "key"])
    assert spec.input_columns == ("key", "value", "offset")
    assert PipelineSpec.from_json(spec.to_json()) == spec
    everything = dataclasses.replace(CLICKSTREAM, input_columns=None)
    assert PipelineSpec.from_json(everything.to_json()).input_columns is None


@pytest.mark.parametrize("columns, named", [(("value", "hedaers"), "['hedaers']"), ((), "[]")])
def test_unknown_or_no_input_columns_fail_naming_the_setting_and_the_choices(columns, named):
    with pytest.raises(ConfigurationError) as error:
        dataclasses.replace(CLICKSTREAM, input_columns=columns)
    assert str(error.value) == (
        f"pipeline 'clickstream': input_columns: {named} is not valid: name one or more of {', '.join(INPUT_COLUMNS)}"
    )

