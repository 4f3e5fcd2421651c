"""The chaos fault schedule: reproducible from the seed, every kind covered, every spec valid."""

from __future__ import annotations

from collections import Counter

import pytest

from onceflow.core import faults
from onceflow_devkit.chaos import schedule


def test_the_same_seed_asks_for_the_same_faults_in_the_same_order():
    kinds = schedule.kinds_for(warehouse_on_s3=True)
    first = schedule.fault_sequence(42, 60, kinds)
    assert first == schedule.fault_sequence(42, 60, kinds)
    assert first != schedule.fault_sequence(43, 60, kinds)
    assert schedule.sequence_json(first) == schedule.sequence_json(schedule.fault_sequence(42, 60, kinds))


@pytest.mark.parametrize("on_s3", [False, True])
def test_ten_cycles_ask_for_every_kind_ten_times(on_s3):
    kinds = schedule.kinds_for(on_s3)
    counts = Counter(f.kind for f in schedule.fault_sequence(7, 10 * len(kinds), kinds))
    assert counts == {kind: 10 for kind in kinds}
    assert (schedule.S3_FAULTS in counts) is on_s3


def test_every_fault_point_spec_names_declared_points_and_abort_points_force_a_rollback():
    sequence = schedule.fault_sequence(3, 400, (schedule.POINT_CRASH, schedule.POINT_RAISE))
    asked = set()
    for fault in sequence:
        parsed = faults.parse(fault.run_param)  # raises on an unknown point or a bad action
        action = "crash" if fault.kind == schedule.POINT_CRASH else "raise"
        chosen = [name for name, (act, _) in parsed.items() if act == action]
        asked.update(chosen)
        if any(name.startswith("abort.") for name in chosen):
            assert parsed["job.after_attempt"] == ("raise", 1), fault
    assert asked >= set(faults.declare_all()) | {faults.ANY}, "400 draws should reach every declared point"


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown chaos fault kind"):
        schedule.fault_sequence(1, 1, ("no_such_kind",))
    with pytest.raises(ValueError, match="at least one"):
        schedule.fault_sequence(1, 1, ())


def test_each_mode_draws_only_the_kinds_that_can_happen_in_it():
    submit, connect = schedule.kinds_for(True, "submit"), schedule.kinds_for(True, "connect")
    assert schedule.KILL_SPARK_SUBMIT in submit and not set(schedule.CONNECT_KINDS) & set(submit)
    assert set(schedule.CONNECT_KINDS) <= set(connect) and schedule.KILL_SPARK_SUBMIT not in connect
    assert set(schedule.INPUT_KINDS) <= set(submit)
    assert not set(schedule.INPUT_KINDS) & set(schedule.kinds_for(True, "submit", mode="backfill"))
    assert set(schedule.RUN_KINDS) <= set(connect) and not set(schedule.RUN_KINDS) & set(schedule.kinds_for(True, "connect", mode="backfill"))
    assert set(submit) | set(connect) == set(schedule.ALL_KINDS) - {*schedule.CLUSTER_KINDS, *schedule.TIMEOUT_KINDS,
                                                                     *schedule.POSTGRES_KINDS, schedule.CATALOG_KILLED}
    # The REST catalog's kind only where the tables are in it (a file warehouse's).
    assert schedule.CATALOG_KILLED in schedule.kinds_for(False, "submit", rest_catalog=True)
    assert schedule.CATALOG_KILLED not in schedule.kinds_for(False, "submit")
    # The repair path: the commit task crashes right after COMMIT (the injector then aborts at the broker).
    [fault] = schedule.fault_sequence(1, 1, (schedule.BROKER_ABORT_AFTER_COMMIT,))
    assert faults.parse(fault.run_param) == {"ledger.decision.after_write": ("crash", 1)}


def test_nodes_die_only_in_a_cluster_and_transactions_time_out_only_where_the_broker_does():
    single = schedule.kinds_for(True, "connect")
    cluster = schedule.kinds_for(True, "connect", cluster=True, times_out=True)
    assert not set(schedule.CLUSTER_KINDS + schedule.TIMEOUT_KINDS) & set(single)
    assert set(cluster) == set(single) | set(schedule.CLUSTER_KINDS) | set(schedule.TIMEOUT_KINDS)
    assert not set(schedule.TIMEOUT_KINDS) & set(schedule.kinds_for(True, "connect", mode="backfill", times_out=True))
    # After the decision: the commit task crashes right after COMMIT, and its retry is held past the timeout.
    [fault] = schedule.fault_sequence(1, 1, (schedule.TIMEOUT_AFTER_DECISION,))
    assert faults.parse(fault.run_param) == {"ledger.decision.after_write": ("crash", 1)}
    node = schedule.fault_sequence(5, 30, (schedule.NODE_KILLED,))
    assert {f.detail["node"] for f in node} == {1, 2, 3} and all(1 <= f.detail["down_s"] <= 10 for f in node)


def test_the_postgresql_kinds_are_drawn_only_with_a_table_among_the_outputs():
    assert not set(schedule.POSTGRES_KINDS) & set(schedule.kinds_for(True, "connect", cluster=True, times_out=True))
    with_table = schedule.kinds_for(True, "connect", postgres=True)
    assert set(with_table) == set(schedule.kinds_for(True, "connect")) | set(schedule.POSTGRES_KINDS)
    crashes = schedule.fault_sequence(3, 20, (schedule.POSTGRES_CRASHED,))
    assert all(0 <= f.detail["after_s"] <= 1.5 and 1 <= f.detail["down_s"] <= 8 for f in crashes)
