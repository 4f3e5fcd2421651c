"""Transaction handles across onceflow versions (pure logic)."""

from __future__ import annotations

from onceflow.kafka.writer import TxnHandle, handle_headers


def _handle(**extra) -> TxnHandle:
    return TxnHandle("p", "out", "0000000001", 0, "t", "onceflow.p.out.0", 7, 1, 1000, **extra)


def test_a_vote_from_a_newer_onceflow_is_read_without_its_unknown_fields():
    raw = {**_handle(staged_sha256="ab" * 32).to_dict(), "a_field_of_the_future": 1}
    assert TxnHandle.from_dict(raw) == _handle(staged_sha256="ab" * 32)


def test_records_of_a_vote_written_before_the_txn_header_are_matched_by_batch_and_split_only():
    assert [k for k, _ in handle_headers(_handle(staged_sha256="ab" * 32))] == ["onceflow.batch", "onceflow.split", "onceflow.txn"]
    assert [k for k, _ in handle_headers(_handle())] == ["onceflow.batch", "onceflow.split"]
