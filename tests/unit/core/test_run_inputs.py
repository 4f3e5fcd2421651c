"""A run's conf is user input: it reaches the planner only as validated ``RunInputs``,
and no key of it can set a protocol fact of a plan."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.core.planning.run_inputs import RunInputs, RunParamsRefused, read_run_inputs

# Every key the plan's one ``params`` dictionary carried before facts were typed
# (ledger format 1), listed from the planners of that time.
PLAN_PARAMS_KEYS = ("interval", "slot", "replaces", "reprocessed", "run_id", "topic_ids", "start_position",
                    "replanned", "backlog", "batches_in_flight", "intervention")
# For each: a value of the wrong type, and one the old planner itself could have written.
VALUES = {
    "interval": ("2026-11-25T00:00:00Z/2026-11-25T01:00:00Z", {"start_ms": 0, "end_ms": 3_600_000}),
    "slot": ("three", 3),
    "replaces": ([1], 1),
    "reprocessed": (7, {"page_minute_counts": "replaced"}),
    "run_id": (["x"], "manual__2026-11-25T00:00:00+00:00"),
    "topic_ids": ("clicks", {"clicks": "AAAAAAAAAAAAAAAAAAAAAA"}),
    "start_position": (0.5, "latest"),
    "replanned": ({"why": 1}, "halved to 50 records per partition"),
    "backlog": (-1, 100),
    "batches_in_flight": (0, 16),
    "intervention": (None, "split to at most 4 records per partition by ana"),
}
OFFSETS_DECLARED = ("max_records_per_partition", "faults")
INTERVAL_DECLARED = ("replace_committed", "faults")


def read(conf, declared=OFFSETS_DECLARED, transform=(), defaults=None):
    params = {**(defaults or {}), **(conf or {})}
    return read_run_inputs("clicks", conf, params, declared, transform)


@pytest.mark.parametrize("declared", [OFFSETS_DECLARED, INTERVAL_DECLARED], ids=["offsets", "interval"])
@pytest.mark.parametrize("key", PLAN_PARAMS_KEYS)
@pytest.mark.parametrize("which", [0, 1], ids=["wrong", "plausible"])
def test_a_conf_key_the_pipeline_does_not_declare_is_refused_naming_it_and_the_allowed_ones(key, which, declared):
    with pytest.raises(RunParamsRefused) as refused:
        read({key: VALUES[key][which]}, declared)
    message = str(refused.value)
    assert repr(key) in message and "Nothing was planned" in message
    assert f"It accepts only: {', '.join(sorted(declared))}" in message


@pytest.mark.parametrize("conf, named", [
    ({"max_records_per_partition": 0}, "max_records_per_partition"),
    ({"max_records_per_partition": "ten"}, "max_records_per_partition"),
    ({"max_records_per_partition": True}, "max_records_per_partition"),
    ({"max_records_per_partition": 2.5}, "max_records_per_partition"),
    ({"faults": 3}, "faults"),
])
def test_a_declared_parameter_of_the_wrong_type_is_refused_naming_it(conf, named):
    with pytest.raises(RunParamsRefused, match=f"run parameter '{named}' must be"):
        read(conf)


def test_a_faults_param_is_refused_on_workers_without_fault_injection_and_read_where_they_allow_it(monkeypatch):
    from onceflow.core import faults

    monkeypatch.delenv(faults.RUN_PARAM_GUARD, raising=False)
    with pytest.raises(RunParamsRefused, match="run parameter 'faults' must be empty on this deployment, got "
                       "'commit.effect.before=crash'.*ONCEFLOW_FAULT_INJECTION=enabled.*Nothing was planned"):
        read({"faults": "commit.effect.before=crash"})
    assert read({"faults": ""}) == read({"faults": None}) == RunInputs()
    monkeypatch.setenv(faults.RUN_PARAM_GUARD, faults.RUN_PARAM_GUARD_VALUE)
    assert read({"faults": "commit.effect.before=crash"}) == RunInputs()


def test_reprocess_takes_a_boolean_only():
    assert read({"replace_committed": True}, INTERVAL_DECLARED).replace_committed is True
    with pytest.raises(RunParamsRefused, match="'replace_committed' must be true or false, got 'yes'"):
        read({"replace_committed": "yes"}, INTERVAL_DECLARED)


def test_declared_inputs_reach_the_planner_typed_and_the_transform_gets_only_its_own():
    inputs = read({"max_records_per_partition": 5, "top_n": 3}, (*OFFSETS_DECLARED, "top_n"), transform=("top_n",),
                  defaults={"max_records_per_partition": 100, "faults": None, "top_n": 10})
    assert inputs == RunInputs(max_records_per_partition=5, replace_committed=False, transform={"top_n": 3})
    assert read(None, defaults={"max_records_per_partition": None}) == RunInputs()


def test_a_conf_that_is_not_an_object_is_refused():
    with pytest.raises(RunParamsRefused, match="must be a JSON object"):
        read_run_inputs("clicks", ["replaces", 1], {}, OFFSETS_DECLARED, ())


keys = st.one_of(st.sampled_from(PLAN_PARAMS_KEYS), st.text(min_size=1, max_size=300))
values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=2000),
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                      max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(conf=st.dictionaries(keys, values, max_size=6))
def test_any_conf_either_reads_as_declared_inputs_or_is_refused_naming_what_was_wrong(conf):
    try:
        inputs = read(conf)
    except RunParamsRefused as refused:
        message = str(refused)
        undeclared = [k for k in conf if k not in OFFSETS_DECLARED]
        if undeclared:
            assert all(repr(k[:80]) in message for k in undeclared), message
        else:
            assert any(f"run parameter {k!r} must be" in message for k in conf), message
        return
    assert set(conf) <= set(OFFSETS_DECLARED)
    assert inputs.transform == {} and inputs.replace_committed is False
