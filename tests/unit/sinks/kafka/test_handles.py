"""Transaction handles across onceflow versions (pure logic)."""

from __future__ import annotations

import hashlib

import pytest

from onceflow.core.participant import Vote
from onceflow.sinks.kafka.handle import TxnHandle, handle_headers, handles_of, vote_payload
from onceflow.sinks.votes import UnreadablePayload


def _handle(**extra) -> TxnHandle:
    return TxnHandle("p", "out", "0000000001", 0, "t", "onceflow.p.out.0", 7, 1, 1000, **extra)


def _voted(*raw_handles) -> list[TxnHandle]:
    """The handles as a commit reads them from a vote written before payloads had a version (version 1)."""
    return handles_of(Vote("out", 1, 1, {"handles": list(raw_handles)}))


def test_a_handle_with_fields_this_onceflow_does_not_know_is_refused_not_read_without_them():
    # A newer onceflow's fields come with a newer payload version, which is refused by name.
    raw = {**_handle(staged_sha256="ab" * 32).to_dict(), "a_field_of_the_future": 1}
    with pytest.raises(UnreadablePayload, match="a_field_of_the_future"):
        _voted(raw)


def test_records_of_a_vote_are_matched_by_the_headers_its_own_onceflow_version_wrote():
    assert handle_headers(_handle(staged_sha256="ab" * 32, record_format=3)) == [
        ("onceflow", b"0000000001/0/" + hashlib.sha256(b"onceflow.p.out.0").hexdigest()[:16].encode())]
    # Votes from before record_format: the onceflow.txn header came with staged_sha256 (the version 1 upgrade).
    before = {k: v for k, v in _handle(staged_sha256="ab" * 32).to_dict().items() if k != "record_format"}
    older = {k: v for k, v in _handle().to_dict().items() if k != "record_format"}
    with_txn, without = _voted(before, older)
    assert [k for k, _ in handle_headers(with_txn)] == ["onceflow.batch", "onceflow.split", "onceflow.txn"]
    assert [k for k, _ in handle_headers(without)] == ["onceflow.batch", "onceflow.split"]


def test_a_vote_names_the_record_format_it_was_written_in():
    h = _handle(staged_sha256="ab" * 32, record_format=3, transaction_version=1)
    assert handles_of(Vote("out", 1, 1, vote_payload([h]))) == [h]
    assert TxnHandle.from_dict(h.to_dict()) == h
    assert TxnHandle.from_dict({k: v for k, v in h.to_dict().items() if k != "record_format"}).record_format == 0
