"""Sink kinds come from one registry: built in, or from another package's entry point."""

from __future__ import annotations

import pytest

from onceflow.protocol.plan import SinkPlan
from onceflow.settings import ConfigurationError
from onceflow.sinks import _table, kinds, sink_kind
from onceflow.spec import FILES, KAFKA, SinkSpec


def test_the_built_in_kinds_say_where_their_output_lives_and_what_to_fence():
    files, kafka = sink_kind(FILES), sink_kind(KAFKA)
    counts = SinkSpec("counts", FILES, "clickstream/counts")
    enriched = SinkSpec("enriched", KAFKA, "clicks_enriched", splits=2)
    assert files.location(counts, "s3://lake/w/") == files.asset_uri(counts, "s3://lake/w") == "s3://lake/w/clickstream/counts"
    assert kafka.location(enriched, "s3://lake/w") == "clicks_enriched"
    assert kafka.asset_uri(enriched, "s3://lake/w") == "kafka://kafka/clicks_enriched"
    assert files.transactional_ids("p", SinkPlan("counts", FILES, 4), 3) == ()
    assert kafka.transactional_ids("p", SinkPlan("enriched", KAFKA, 2), 3) == ("onceflow.p.enriched.b3.0", "onceflow.p.enriched.b3.1")


def test_an_unknown_kind_is_refused_naming_the_known_ones():
    with pytest.raises(ConfigurationError, match="kind 'delta' is not valid: use one of 'files', 'iceberg', 'kafka'"):
        SinkSpec("t", "delta", "db.table")
    with pytest.raises(ConfigurationError, match="sink kind 'delta' is not known"):
        sink_kind("delta")


def test_another_package_adds_a_kind_through_the_entry_point_group(tmp_path, monkeypatch, request):
    (tmp_path / "acme_sink.py").write_text(
        "class Tables:\n    name = 'acme_tables'\n    def location(self, sink, warehouse):\n        return 'acme:' + sink.target\n"
        "KIND = Tables()\n"
    )
    dist = tmp_path / "acme_sink-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-sink\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[onceflow.sinks]\nacme_tables = acme_sink:KIND\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _table.cache_clear()  # installed while this process runs: a process reads the entry points once
    request.addfinalizer(_table.cache_clear)  # the kind leaves with its path
    request.addfinalizer(sink_kind.cache_clear)
    assert "acme_tables" in kinds()
    sink = SinkSpec("t", "acme_tables", "db.t")
    assert sink_kind("acme_tables").location(sink, "file:///w") == "acme:db.t"
