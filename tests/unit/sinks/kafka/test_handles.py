"""Transaction handles across onceflow versions (pure logic)."""

from __future__ import annotations

import hashlib

from onceflow.sinks.kafka.handle import TxnHandle, handle_headers


def _handle(**extra) -> TxnHandle:
    return TxnHandle("p", "out", "0000000001", 0, "t", "onceflow.p.out.0", 7, 1, 1000, **extra)


def test_a_vote_from_a_newer_onceflow_is_read_without_its_unknown_fields():
    raw = {**_handle(staged_sha256="ab" * 32).to_dict(), "a_field_of_the_future": 1}
    assert TxnHandle.from_dict(raw) == _handle(staged_sha256="ab" * 32)


def test_records_of_a_vote_are_matched_by_the_headers_its_own_onceflow_version_wrote():
    assert handle_headers(_handle(staged_sha256="ab" * 32, record_format=3)) == [
        ("onceflow", b"0000000001/0/" + hashlib.sha256(b"onceflow.p.out.0").hexdigest()[:16].encode())]
    # Votes from before record_format: the onceflow.txn header came with staged_sha256.
    assert [k for k, _ in handle_headers(_handle(staged_sha256="ab" * 32))] == ["onceflow.batch", "onceflow.split", "onceflow.txn"]
    assert [k for k, _ in handle_headers(_handle())] == ["onceflow.batch", "onceflow.split"]


def test_a_vote_names_the_record_format_it_was_written_in():
    h = _handle(staged_sha256="ab" * 32, record_format=3)
    assert TxnHandle.from_dict(h.to_dict()) == h
    assert TxnHandle.from_dict({k: v for k, v in h.to_dict().items() if k != "record_format"}).record_format == 0
