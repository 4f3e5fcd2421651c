"""Saved chaos runs added up: the bar check, and the docs/chaos.md table generated from the saved JSON."""

from __future__ import annotations

import json
import re

import pytest

from onceflow_devkit import doc_blocks
from onceflow_devkit.chaos import report, schedule
from onceflow_devkit.chaos.figures import ChaosFigures
from onceflow.ops.cli import main

from tests.support import ROOT
SAVED = sorted((ROOT / "docs" / "chaos-runs").glob("*.json"))


def run(broker="noida", warehouse="file", per_kind=3, kinds=report.EMBEDDED.kinds, **changes):
    injected = {kind: per_kind for kind in kinds}
    figures = {
        "ok": True, "broker": broker, "warehouse": warehouse, "seed": 1,
        "batches_run": sum(injected.values()), "faulted_batches": sum(injected.values()),
        "faults_injected": injected, "faults_missed": {}, "fault_details": {"s3_slow": 2},
        "batches_aborted": 1, "batches_recovered": 1, "records_in": 200 * sum(injected.values()),
        "duplicates": 0, "missing": 0, "failures": [], "wall_time_s": 600.0,
        "reproduce": f"onceflow chaos --batches {sum(injected.values())} --seed 1 --broker {broker} --warehouse {warehouse}",
        "file": "x.json",
    }
    return {**figures, **changes}


def matrix(per_kind):
    return [run(b, w, per_kind) for b in ("noida", "tansu") for w in ("file", "s3")]


def test_the_bar_is_met_by_enough_clean_faulted_batches_over_the_whole_matrix():
    assert report.check(matrix(per_kind=17), report.EMBEDDED).met  # 4 x 17 x 17 = 1,156 faulted, 68 per kind


def test_each_shortfall_is_named():
    short = report.check(matrix(per_kind=2), report.EMBEDDED).shortfalls  # 4 x 17 x 2 = 136 faulted, 8 per kind
    assert f"{4 * len(report.EMBEDDED.kinds) * 2} faulted batches, the bar is 1000" in short
    assert {s.split()[0] for s in short if "injected" in s} == set(report.EMBEDDED.kinds)

    only_noida_file = [run("noida", "file", per_kind=70)]  # 1,050 faulted
    short = report.check(only_noida_file, report.EMBEDDED).shortfalls
    assert short == ("no run on broker tansu", "no run on a s3 warehouse")


def test_each_bar_counts_only_the_runs_on_its_brokers():
    embedded = matrix(per_kind=17)
    cluster = [run("apache-cluster", w, per_kind=12, kinds=report.APACHE_CLUSTER.kinds) for w in ("file", "s3")]

    assert not report.check(embedded, report.APACHE_CLUSTER).met  # 1,156 embedded batches prove nothing on Apache Kafka
    assert report.check(embedded + cluster, report.APACHE_CLUSTER).met  # 2 x 21 x 12 = 504 faulted, 24 per kind
    assert report.check(embedded + cluster, report.EMBEDDED).met
    short = report.check(cluster[:1], report.APACHE_CLUSTER).shortfalls
    assert short == ("252 faulted batches, the bar is 500", "no run on a s3 warehouse")
    assert set(schedule.CLUSTER_KINDS) | set(schedule.TIMEOUT_KINDS) <= set(report.APACHE_CLUSTER.kinds)


def test_the_postgresql_bar_counts_only_the_cluster_runs_with_a_table_and_their_server_faults():
    mixed = [*schedule.POSTGRES_KINDS, schedule.POINT_CRASH]
    with_table = [run("apache-cluster", w, per_kind=5, kinds=mixed, postgres=True) for w in ("file", "s3")]
    without = [run("apache-cluster", w, per_kind=20, kinds=mixed) for w in ("file", "s3")]

    assert report.check(with_table, report.POSTGRES_TABLE).met  # 2 x 3 x 5 = 30 faulted, 10 per PostgreSQL kind
    assert report.check(without, report.POSTGRES_TABLE).shortfalls[0] == "0 faulted batches, the bar is 30"
    short = report.check(with_table[:1], report.POSTGRES_TABLE).shortfalls
    assert short == ("15 faulted batches, the bar is 30", "no run on a s3 warehouse",
                     "postgres_crashed injected 5 times, the bar is 10",
                     "postgres_connections_killed injected 5 times, the bar is 10")
    assert not set(schedule.POSTGRES_KINDS) & (set(report.EMBEDDED.kinds) | set(report.APACHE_CLUSTER.kinds))


def test_a_run_on_the_secured_broker_counts_under_the_secured_bar_alone():
    kinds = report.SECURED.kinds
    secured = run("apache", "file", per_kind=16, kinds=kinds, secure=True)  # 4 x 16 = 64 faulted
    plain = run("apache", "file", per_kind=16, kinds=kinds)
    cluster = run("apache-cluster", "file", per_kind=16, kinds=kinds, secure=True)

    assert report.check([plain], report.SECURED).shortfalls[0] == "0 faulted batches, the bar is 60"
    assert report.check([secured], report.SECURED).shortfalls == ("no run on broker apache-cluster",
                                                                 "no run on a s3 warehouse")
    assert report.check([secured, cluster], report.APACHE_CLUSTER).shortfalls[0] == "0 faulted batches, the bar is 500"
    short = report.check([run("apache", "file", per_kind=0, kinds=kinds, secure=True)], report.SECURED).shortfalls
    assert {s.split()[0] for s in short if "injected 0 times, the bar is 1" in s} == set(kinds)
    text = report.markdown([secured, plain])
    assert text.index("#### Apache Kafka secured") < text.index("| apache secured / file |") < text.index("#### Other")
    assert text.index("#### Other brokers") < text.index("| apache / file |")


def test_the_figures_show_each_run_with_the_code_it_ran_on_under_its_broker():
    runs = [run("noida", "file", per_kind=1), run("apache-cluster", "s3", per_kind=1, commit="604fc3258043")]

    text = report.markdown(runs)

    apache, embedded = text.index("#### Apache Kafka"), text.index("#### Kafka-compatible brokers")
    assert apache < text.index("| apache-cluster / s3 | 604fc3258043 |") < embedded
    assert embedded < text.index("| noida / file | not recorded |")


def test_a_run_with_a_duplicate_fails_the_bar_however_many_batches():
    runs = matrix(per_kind=10)
    runs[2] = run("tansu", "file", per_kind=10, ok=False, duplicates=1, failures=["clicks_enriched: 1 duplicate"])
    short = report.check(runs, report.EMBEDDED).shortfalls
    assert any("is not OK" in s and "clicks_enriched: 1 duplicate" in s for s in short)
    assert "1 duplicates and 0 missing records" in short


def test_load_runs_refuses_a_file_that_is_not_chaos_output(tmp_path):
    stray = tmp_path / "audit.json"
    stray.write_text(json.dumps({"ok": True, "outputs": {}}))
    with pytest.raises(ValueError, match="audit.json: not the output of 'onceflow chaos --json'"):
        report.load_runs([stray])


def test_every_saved_run_is_clean_and_docs_chaos_shows_exactly_their_figures(capsys):
    assert SAVED, "docs/chaos-runs holds the runs docs/chaos.md reports"
    runs = report.load_runs(SAVED)
    assert all(r["ok"] and r["duplicates"] == 0 and r["missing"] == 0 for r in runs)
    assert doc_blocks.read(ROOT / "docs" / "chaos.md", "chaos-report").strip() == report.markdown(runs).strip(), (
        "docs/chaos.md's chaos figures differ from docs/chaos-runs: regenerate with "
        "onceflow chaos-report docs/chaos-runs/*.json"
    )
    assert main(["chaos-report", *map(str, SAVED)]) == 0
    assert report.markdown(runs) in capsys.readouterr().out


_SEED_FIGURES = re.compile(r"[Ss]eed (?P<seed>\d{4}) \([^()]*\)(?::\*\*|:) (?P<batches>\d+) batches, (?P<faulted>\d+) faulted"
                           r"(?P<rest>[^.]*)")
_BLOCK = re.compile(r"<!-- chaos-report begin -->.*?<!-- chaos-report end -->", re.S)


def test_the_page_states_a_saved_run_s_figures_in_the_generated_table_alone():
    # A run's figures have one place on the page, the table chaos-report makes from its JSON: a figure
    # told again in the prose ("Seed 5404 (S3 warehouse, ...): 40 batches, 35 faulted") would be a second copy.
    page = " ".join(_BLOCK.sub(" ", (ROOT / "docs" / "chaos.md").read_text()).split())
    told = [claim[0] for claim in _SEED_FIGURES.finditer(page)]
    assert not told, f"docs/chaos.md tells saved runs' figures outside its chaos-report table: {told}"
    assert _SEED_FIGURES.search("Seed 5404 (S3 warehouse, code 8bc73fa): 40 batches, 35 faulted, 13 aborted")


def test_chaos_report_update_writes_the_figures_into_the_page_s_block(tmp_path, capsys):
    page = tmp_path / "chaos.md"
    page.write_text("# Chaos\n<!-- chaos-report begin -->\nold figures\n<!-- chaos-report end -->\nThe story.\n")
    assert main(["chaos-report", "--update", str(page), *map(str, SAVED)]) == 0
    assert doc_blocks.read(page, "chaos-report") == report.markdown(report.load_runs(SAVED)).strip("\n")
    assert page.read_text().startswith("# Chaos\n") and page.read_text().endswith("The story.\n")


def test_a_run_names_the_engines_its_audit_read_the_table_with_and_an_older_save_names_none():
    figures = ChaosFigures("noida", "file", 1, [], table_readers=["pyiceberg 0.12.0", "Spark 4.1.4"])
    saved = json.loads(json.dumps(figures.to_dict()))  # as `onceflow chaos --json` saves it
    assert saved["table_readers"] == ["pyiceberg 0.12.0", "Spark 4.1.4"]
    assert "  table read by  pyiceberg 0.12.0, Spark 4.1.4" in figures.summary().splitlines()
    older = run("tansu", "file", per_kind=1)  # saved before the field

    text = report.markdown([{**saved, "file": "x.json"}, older])

    assert "| noida / file (table read by pyiceberg 0.12.0 and Spark 4.1.4) | unknown |" in text
    assert "| tansu / file | not recorded |" in text


def test_the_zombies_bar_counts_the_runs_that_asked_for_frozen_zombies_and_no_other_bar_requires_them():
    zombie_run = [{"kind": schedule.FROZEN_ZOMBIE, "detail": {}}] * 10 + [{"kind": schedule.NO_FAULT, "detail": {}}] * 20
    asked = run("apache", "file", per_kind=10, kinds=(schedule.FROZEN_ZOMBIE,), fault_sequence=zombie_run)
    other = run("apache", "file", per_kind=12, kinds=schedule.BROKER_KINDS,
                fault_sequence=[{"kind": schedule.BROKER_FENCE, "detail": {}}])

    assert report.check([asked, other], report.ZOMBIES).met  # a file warehouse is all it needs
    assert report.check([other], report.ZOMBIES).shortfalls[0] == "0 faulted batches, the bar is 10"
    assert not report.check([run("apache", "file", per_kind=9, kinds=(schedule.FROZEN_ZOMBIE,),
                                 fault_sequence=zombie_run)], report.ZOMBIES).met
    assert all(schedule.FROZEN_ZOMBIE not in bar.kinds for bar in report.BARS if bar is not report.ZOMBIES)


def test_a_run_without_a_fault_is_neither_injected_nor_missed():
    from onceflow_devkit.chaos.figures import BatchRun
    from onceflow_devkit.chaos.injectors import Injection

    quiet = schedule.Fault(schedule.NO_FAULT)
    figures = ChaosFigures("apache", "file", 1, [quiet])
    figures.runs.append(BatchRun(1, quiet, Injection(schedule.NO_FAULT, False, "no fault"), "r", "success", None, 1.0))
    assert (figures.faulted_batches, figures.missed_by_kind) == (0, {})
