"""Sink kinds come from one registry: built in, or from another package's entry point."""

from __future__ import annotations

import sys
import zipfile

import pytest

from onceflow.core.plan import SinkPlan
from onceflow.config.settings import ConfigurationError
from onceflow.sinks import _table, kinds, sink_kind
from onceflow.spark.shipping import shipped_code
from onceflow.pipeline.spec import FILES, KAFKA, PipelineSpec, SinkSpec


def test_the_built_in_kinds_say_where_their_output_lives_and_what_to_fence():
    files, kafka = sink_kind(FILES), sink_kind(KAFKA)
    counts = SinkSpec("counts", FILES, "clickstream/counts")
    enriched = SinkSpec("enriched", KAFKA, "clicks_enriched", splits=2)
    assert files.location(counts, "s3://lake/w/") == files.asset_uri(counts, "s3://lake/w") == "s3://lake/w/clickstream/counts"
    assert kafka.location(enriched, "s3://lake/w") == "clicks_enriched"
    assert kafka.asset_uri(enriched, "s3://lake/w") == "kafka://kafka/clicks_enriched"
    assert files.transactional_ids("p", SinkPlan("counts", FILES, 4), 3) == ()
    assert kafka.transactional_ids("p", SinkPlan("enriched", KAFKA, 2), 3) == ("onceflow.p.enriched.pool3.0", "onceflow.p.enriched.pool3.1")


def test_an_unknown_kind_is_refused_naming_the_installed_ones_and_how_a_package_adds_one():
    installed = r"sink kind 'delta' is not installed: the installed kinds are 'files', 'iceberg', 'kafka'"
    how = r"installed \(pip install\) .* with an entry point in group 'onceflow.sinks' naming it"
    with pytest.raises(ConfigurationError, match=f"^sink 't': {installed}.*{how}"):
        SinkSpec("t", "delta", "db.table")
    with pytest.raises(ConfigurationError, match=f"^{installed}.*{how}"):
        sink_kind("delta")


def _install(tmp_path, monkeypatch, request, module: str) -> None:
    """A package of its own, ``acme_sink``, registering kind ``acme_tables`` by entry point."""
    (tmp_path / "acme_sink.py").write_text(module)
    dist = tmp_path / "acme_sink-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-sink\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[onceflow.sinks]\nacme_tables = acme_sink:KIND\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "acme_sink", raising=False)  # another test's acme_sink
    _table.cache_clear()  # installed while this process runs: a process reads the entry points once
    request.addfinalizer(_table.cache_clear)  # the kind leaves with its path
    request.addfinalizer(sink_kind.cache_clear)


def test_another_package_adds_a_kind_through_the_entry_point_group(tmp_path, monkeypatch, request):
    _install(tmp_path, monkeypatch, request, (
        "from onceflow.sinks.api import SinkKind\n"
        "class Tables(SinkKind):\n    name = 'acme_tables'\n    data_source = 'acme_sink'\n"
        "    def location(self, sink, warehouse):\n        return 'acme:' + sink.target\n"
        "    asset_uri = participant = pre_commit = committed_output = location\n"
        "KIND = Tables()\n"))
    assert "acme_tables" in kinds()
    sink = SinkSpec("t", "acme_tables", "db.t")
    kind = sink_kind("acme_tables")
    assert kind.location(sink, "file:///w") == "acme:db.t"
    # What it leaves out takes the contract's defaults: no options, nothing to fence, no reprocessing.
    assert (kind.transactional_ids("p", SinkPlan("t", "acme_tables", 2), 1), kind.reprocess(sink)) == ((), None)
    with pytest.raises(ConfigurationError, match=r"option\(s\) mode are not options of a acme_tables sink"):
        SinkSpec("t", "acme_tables", "db.t", options={"mode": "upsert"})
    # Its data source runs on Spark's executors: the package goes there with onceflow and the transform's.
    spec = PipelineSpec("p", ("clicks",), "tests.doubles.specs:transform", (sink,))
    shipped = [zipfile.ZipFile(z).namelist() for z in shipped_code(spec)]
    assert [names for names in shipped if "acme_sink.py" in names], shipped


def test_a_kind_that_leaves_out_a_required_member_is_refused_naming_it(tmp_path, monkeypatch, request):
    _install(tmp_path, monkeypatch, request, (
        "class Tables:\n    name = 'acme_tables'\n    def location(self, sink, warehouse):\n        return sink.target\n"
        "KIND = Tables()\n"))
    with pytest.raises(ConfigurationError, match="'acme_tables' .acme_sink:KIND. does not define data_source, "
                                                 "asset_uri, participant, pre_commit, committed_output of the sink contract"):
        sink_kind("acme_tables")
