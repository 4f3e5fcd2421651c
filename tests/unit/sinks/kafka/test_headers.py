"""The headers that say which split wrote a record, in each format (pure logic)."""

from __future__ import annotations

import pytest

from onceflow.sinks.kafka.headers import CURRENT_FORMAT, FORMATS, REPAIR, batch_and_split, record_headers, writer_tag
from onceflow.sinks.kafka.ids import transactional_id

TXN = transactional_id("clickstream_demo", "clicks_enriched", 3)


def test_the_current_format_is_one_short_header_naming_batch_split_and_writer():
    headers = record_headers("0000000042", 3, TXN)
    assert headers == [("onceflow", f"0000000042/3/{writer_tag(TXN)}".encode())]
    assert CURRENT_FORMAT == 3
    # What every record carries: under half of the three headers it replaced.
    assert sum(len(k) + len(v) for k, v in headers) <= 40 < sum(len(k) + len(v) for k, v in record_headers("0000000042", 3, TXN, 2)) / 2


def test_writers_of_the_same_batch_and_split_in_other_pipelines_or_sinks_are_told_apart():
    others = [transactional_id("clickstream_demo", "clicks_dead_letter", 3), transactional_id("other", "clicks_enriched", 3)]
    assert len({writer_tag(t) for t in [TXN, *others]}) == 3
    assert len(writer_tag(TXN)) == 16


@pytest.mark.parametrize("record_format", sorted(FORMATS))
def test_every_format_reads_back_as_its_batch_and_split_and_a_repair_or_user_header_changes_nothing(record_format):
    headers = record_headers("0000000007", 12, TXN, record_format)
    assert batch_and_split(headers) == ("0000000007", "12")
    assert batch_and_split([*headers, REPAIR, ("user", b"x/y/z")]) == ("0000000007", "12")
    assert batch_and_split(dict(headers)) == ("0000000007", "12")


def test_records_onceflow_did_not_write_have_no_batch():
    assert batch_and_split(None) is None
    assert batch_and_split([]) is None
    assert batch_and_split([("onceflow.batch", b"0000000001")]) is None  # no split: not one of ours
    assert batch_and_split([("trace", b"1")]) is None
    assert batch_and_split([("onceflow", b"someone else's")]) is None  # a header of that name in another shape


def test_an_unknown_format_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match="record format 9 is unknown.*commit this batch with the onceflow version"):
        record_headers("0000000001", 0, TXN, 9)
