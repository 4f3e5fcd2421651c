"""The chaos fault schedule: reproducible from the seed, every kind covered, every spec valid."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from onceflow.core import faults
from onceflow.core.plan import TXN_ID_POOL
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


def test_frozen_zombies_freeze_the_first_runs_each_with_a_pool_of_runs_after_it():
    assert schedule.zombie_runs(30) == range(1, 11)  # ten zombies fit in a run of 30 batches
    assert schedule.zombie_runs(20) == range(1, 4)
    assert not schedule.zombie_runs(TXN_ID_POOL + 1)  # no run after the pool's turn to meet it in
    for batches in range(1, 60):
        assert all(n + TXN_ID_POOL < batches for n in schedule.zombie_runs(batches))
        assert len(schedule.zombie_runs(batches)) <= schedule.ZOMBIES_AT_ONCE


def test_asking_for_frozen_zombies_alone_runs_the_other_batches_without_a_fault():
    sequence = schedule.fault_sequence(1, 30, (schedule.FROZEN_ZOMBIE,))
    assert [f.kind for f in sequence] == [schedule.FROZEN_ZOMBIE] * 10 + [schedule.NO_FAULT] * 20
    mixed = schedule.fault_sequence(1, 30, (schedule.FROZEN_ZOMBIE, schedule.KILL_PYTHON_WORKER))
    assert [f.kind for f in mixed] == [schedule.FROZEN_ZOMBIE] * 10 + [schedule.KILL_PYTHON_WORKER] * 20


def test_a_zombie_is_held_before_the_clickstream_pipeline_s_first_kafka_output():
    from onceflow_examples.clickstream import CLICKSTREAM

    fault = schedule.draw(random.Random(1), schedule.FROZEN_ZOMBIE, [])
    (point, (action, hits)), = faults.parse(fault.run_param).items()
    assert (point, action) == ("job.between_outputs", "hold")
    # The point fires before output i (i >= 1) on its i-th hit: the output the hold comes before.
    assert [s.kind for s in CLICKSTREAM.sinks].index("kafka") == hits


def test_frozen_zombies_are_asked_for_by_name_only_and_only_where_a_job_has_workers_of_its_own():
    for on_s3 in (False, True):
        for spark in schedule.SPARK_MODES:
            for mode in ("offsets", "backfill"):
                assert schedule.FROZEN_ZOMBIE not in schedule.kinds_for(on_s3, spark, mode, cluster=True, times_out=True,
                                                                        postgres=True, rest_catalog=True)
    assert schedule.opt_in_kinds_for("submit", "offsets") == (schedule.FROZEN_ZOMBIE,)
    assert schedule.opt_in_kinds_for("connect", "offsets") == () == schedule.opt_in_kinds_for("submit", "backfill")
