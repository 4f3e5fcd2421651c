"""Run confs through a real Airflow (api-server, scheduler, dag-processor) as the Trigger dialog,
``airflow dags trigger --conf`` or the REST API send them: every key the plan's one parameter
dictionary carried before facts were typed, with a wrong and a plausible value, then confs drawn
at random. Each run is refused at its plan task, naming what was wrong, before anything is
written; every committed batch stays intact (the audit reads the raw input and the real outputs);
the pipeline plans and commits its next batch. Slow: ``make test`` sends three of these confs in
test_clickstream_api.py."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onceflow_devkit.local_airflow.rest import AirflowHarnessError
from tests.system.e2e.conftest import broker_with_topics, make_world, refused_runs
from tests.unit.core.test_run_inputs import PLAN_PARAMS_KEYS, VALUES

pytestmark = pytest.mark.slow
DAG_ID = "clickstream_exactly_once"
PER_PARTITION = 100


@pytest.fixture(scope="module")
def running(tmp_path_factory, postgres_server, e2e_rest_catalog):
    with broker_with_topics() as broker:
        world = make_world(broker, tmp_path_factory.mktemp("conf-fuzz"), postgres_server, catalog=e2e_rest_catalog)
        world.produce(6 * PER_PARTITION, seed=7)
        with world.airflow, world.airflow.api() as api:
            api.wait_for_dag(DAG_ID, timeout=180)
            api.unpause(DAG_ID)
            run_id = api.trigger(DAG_ID, conf={"max_records_per_partition": PER_PARTITION})
            assert api.wait_for_run(DAG_ID, run_id, timeout=600) == "success", api.explain(DAG_ID, run_id)
            yield world, api, world.audit()


@pytest.mark.parametrize("key", PLAN_PARAMS_KEYS)
def test_a_protocol_key_in_a_run_conf_is_refused_naming_it(running, key):
    world, api, committed = running
    confs = [{key: VALUES[key][0]}, {key: VALUES[key][1]}]
    for log in refused_runs(api, DAG_ID, confs).values():
        assert f"run parameter(s) {key!r} that the pipeline does not declare" in log, log
    assert world.runtime.coordinator.latest_seq() == 1
    assert world.audit().to_dict() == committed.to_dict()


def test_a_faults_conf_on_workers_without_fault_injection_is_refused_and_its_rollback_has_nothing_to_do(running):
    world, api, committed = running  # the workers of this Airflow do not set ONCEFLOW_FAULT_INJECTION
    confs = [{"faults": "commit.effect.before=crash"}, {"faults": "*=raise@2", "max_records_per_partition": 10}]
    for log in refused_runs(api, DAG_ID, confs).values():
        assert "run parameter 'faults' must be empty on this deployment" in log, log
        assert "ONCEFLOW_FAULT_INJECTION=enabled" in log and "Nothing was planned" in log, log
    assert world.runtime.coordinator.latest_seq() == 1
    assert world.audit().to_dict() == committed.to_dict()


_values = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.text(max_size=5000),
                    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))


def _holds_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    return isinstance(value, list) and any(map(_holds_nul, value))


def test_random_confs_are_refused_or_run_and_the_pipeline_goes_on(running):
    world, api, committed = running
    confs = []

    @settings(max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(conf=st.dictionaries(st.one_of(st.sampled_from(PLAN_PARAMS_KEYS), st.text(min_size=1, max_size=200)),
                                _values, min_size=1, max_size=4))
    def draw(conf):
        confs.append(conf)

    draw()
    # Airflow keeps a run's conf as PostgreSQL JSONB, which cannot hold U+0000: its API refuses such a conf
    # (HTTP 422) and no run exists to refuse. Every other conf reaches the plan task, which refuses it.
    stored = [conf for conf in confs if not _holds_nul(conf)]
    for conf in confs:
        if _holds_nul(conf):
            with pytest.raises(AirflowHarnessError, match="answered HTTP 422"):
                api.trigger(DAG_ID, conf=conf)
    for conf, log in zip(stored, refused_runs(api, DAG_ID, stored).values()):
        assert "that the pipeline does not declare" in log and repr(sorted(conf)[0][:80]) in log, (conf, log)
    assert world.runtime.coordinator.latest_seq() == 1
    run_id = api.trigger(DAG_ID, conf={"max_records_per_partition": PER_PARTITION})
    assert api.wait_for_run(DAG_ID, run_id, timeout=600) == "success", api.explain(DAG_ID, run_id)
    report = world.audit()
    assert report.ok and report.committed_batches == 2 and report.input_records == 4 * PER_PARTITION, report.summary()
