"""benchmarks/secured_kafka.py's figures: onceflow's ratios per broker, secured / PLAINTEXT of the others."""

from __future__ import annotations

import sys

from onceflow_devkit import doc_blocks
from tests.support import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import secured_kafka  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)


def a_round(scale: float) -> dict[str, float]:
    """Seconds of one kafka_throughput round, every measure ``scale`` times a base."""
    base = {"write_raw": 1.0, "write_raw_readable": 1.1, "freed_raw": 0.0, "write_of": 1.25, "commit_of": 0.25,
            "freed_of": 0.0, "write_of_unstaged": 1.1, "write_raw_plain": 0.9, "write_at_least_once": 0.9, "write_none": 0.9, "read_raw": 2.0,
            "read_raw_all": 2.5, "read_of": 2.5, "read_of_value": 1.6, "read_of_parallel": 1.0}
    return {k: v * scale for k, v in base.items()}


def test_figures_are_medians_of_the_rounds_with_onceflow_over_its_baseline():
    figures = secured_kafka.kafka_figures([a_round(1), a_round(3), a_round(2)], [0.05, 0.07, 0.06], records=1000)
    assert figures["write_raw_rec_s"] == 500 and figures["write_onceflow_rec_s"] == 400
    assert figures["write_ratio"] == 0.8 and figures["read_ratio"] == 1.25 and figures["read_all_fields_ratio"] == 1.0
    assert (figures["raw_write_s"], figures["producer_setup_s"], figures["onceflow_commit_s"]) == (2.0, 0.06, 0.5)


def test_secured_over_plaintext_divides_every_figure_but_the_ratios():
    plain = secured_kafka.kafka_figures([a_round(1)], [0.05], 1000) | secured_kafka.spark_figures(
        [{"plain_s": 20.0, "onceflow_s": 22.0}])
    secured = secured_kafka.kafka_figures([a_round(2)], [0.1], 1000) | secured_kafka.spark_figures(
        [{"plain_s": 30.0, "onceflow_s": 36.0}])
    ratios = secured_kafka.secured_over_plaintext({"plaintext": plain, "secured": secured})
    assert ratios["write_raw_rec_s"] == 0.5 and ratios["producer_setup_s"] == 2.0 and ratios["spark_onceflow_s"] == 36 / 22
    assert not {"write_ratio", "read_ratio", "read_all_fields_ratio", "spark_ratio"} & set(ratios)
    assert len(secured_kafka.table({"plaintext": plain, "secured": secured})) == len(secured_kafka.FIGURES)


def test_the_setup_is_told_apart_from_the_rest_of_the_raw_writes_extra_time():
    said = secured_kafka.where_the_time_goes({"plaintext": {"raw_write_s": 1.0, "producer_setup_s": 0.05},
                                              "secured": {"raw_write_s": 1.5, "producer_setup_s": 0.15}})
    assert "(+0.50 s)" in said and "(+0.100 s)" in said and "the rest, +0.40 s" in said


def test_the_readme_keeps_the_block_the_benchmark_writes():
    doc_blocks.read(ROOT / "benchmarks" / "README.md", secured_kafka.BLOCK)
