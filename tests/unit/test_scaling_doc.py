"""docs/scaling.md states the transactional-id cost of the saved run, as the benchmark renders it."""

from __future__ import annotations

import json
import sys

from onceflow_devkit import doc_blocks
from tests.support import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import txn_id_cost  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)


def test_the_scaling_page_states_the_saved_runs_figures():
    saved = json.loads((ROOT / txn_id_cost.SAVED).read_text())
    assert doc_blocks.read(ROOT / "docs" / "scaling.md", txn_id_cost.BLOCK) == txn_id_cost.report(saved)


def test_the_saved_run_held_every_id_and_grew_by_a_positive_cost():
    saved = json.loads((ROOT / txn_id_cost.SAVED).read_text())
    assert saved["coordinator_holds_every_id"]
    assert saved["heap_bytes_per_id"] > 0 and saved["transaction_state_bytes_per_id"] > 0
    held = saved["deployment"]
    assert held["ids_held"] == int(held["pipelines"] * held["batches_per_minute"] * 60 * 24 * held["expiration_days"]
                                   * held["ids_per_batch"])


def test_array_classes_read_as_java_spells_them():
    assert [txn_id_cost.java_class(c) for c in ("[B", "[Ljava.lang.Object;", "org.apache.kafka.X.TransactionMetadata")] == [
        "byte[]", "Object[]", "TransactionMetadata"]
