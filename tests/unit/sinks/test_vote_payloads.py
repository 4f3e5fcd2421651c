"""Every kind's vote payload names its version: a newer one is refused by name, an older one upgraded
through a named function (``votes.PayloadFormat``); payloads written before versions are version 1."""

from __future__ import annotations

import pytest

from onceflow.config.broker_profiles import PROFILES
from onceflow.core.participant import Outcome, Vote
from onceflow.core.plan import Plan
from onceflow.sinks.files.entries import FileEntry
from onceflow.sinks.files.participant import FILES_PAYLOAD, FileSink
from onceflow.sinks.iceberg.participant import ICEBERG_PAYLOAD, IcebergTableSink
from onceflow.sinks.iceberg.tables import attempt_dir
from onceflow.sinks.kafka.handle import KAFKA_PAYLOAD, TxnHandle, handle_headers, handles_name_their_formats, handles_of, vote_payload
from onceflow.sinks.kafka.participant import KafkaSinkParticipant
from onceflow.sinks.votes import PAYLOAD_VERSION, NewerPayload, PayloadFormat, UnreadablePayload

FORMATS = {"files": FILES_PAYLOAD, "kafka": KAFKA_PAYLOAD, "iceberg": ICEBERG_PAYLOAD}


def _handle(**extra) -> TxnHandle:
    return TxnHandle("p", "out", "0000000001", 0, "t", "onceflow.p.out.0", 7, 1, 1000, **extra)


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_a_payload_newer_than_this_onceflow_reads_is_refused_naming_the_kind_and_both_versions(kind):
    newest = FORMATS[kind].version
    with pytest.raises(NewerPayload) as refused:
        FORMATS[kind].read({PAYLOAD_VERSION: newest + 1})
    assert f"a {kind} vote payload of version {newest + 1}" in str(refused.value)
    assert f"at most version {newest}" in str(refused.value)


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_a_payload_is_written_with_its_version_and_one_without_is_read_as_version_1(kind):
    written = FORMATS[kind].write({"files": []})
    assert written[PAYLOAD_VERSION] == FORMATS[kind].version
    assert FORMATS[kind].read(written) == written
    assert FORMATS[kind].read({"files": []})[PAYLOAD_VERSION] == FORMATS[kind].version  # upgraded from 1
    with pytest.raises(UnreadablePayload, match="names version 0"):
        FORMATS[kind].read({PAYLOAD_VERSION: 0})


def test_each_older_version_is_upgraded_by_its_own_function_one_version_at_a_time():
    steps = []
    fmt = PayloadFormat("k", 3, {1: lambda p: steps.append(1) or {**p, "b": 1}, 2: lambda p: steps.append(2) or {**p, "c": 2}})
    assert fmt.read({"a": 0}) == {"a": 0, "b": 1, "c": 2, PAYLOAD_VERSION: 3} and steps == [1, 2]
    assert fmt.read({"a": 0, PAYLOAD_VERSION: 2}) == {"a": 0, "c": 2, PAYLOAD_VERSION: 3}
    with pytest.raises(ValueError, match="no upgrade from version"):
        PayloadFormat("k", 2)


def test_a_kafka_version_1_payload_is_upgraded_to_handles_that_name_their_record_format():
    # Version 1 handles from before record_format: the onceflow.txn header (format 2) came with staged_sha256.
    old = {"handles": [{**_handle(staged_sha256="ab" * 32).to_dict(), "record_format": 0, "transaction_version": 0},
                       {k: v for k, v in _handle().to_dict().items() if k not in ("record_format", "transaction_version")},
                       _handle(record_format=3, transaction_version=1).to_dict()]}
    upgraded = handles_name_their_formats(old)
    assert [(h["record_format"], h["transaction_version"]) for h in upgraded["handles"]] == [(2, 1), (1, 1), (3, 1)]
    handles = handles_of(Vote("out", 1, 1, old))
    assert [[k for k, _ in handle_headers(h)] for h in handles] == [
        ["onceflow.batch", "onceflow.split", "onceflow.txn"], ["onceflow.batch", "onceflow.split"], ["onceflow"]]
    assert [h.identity[3] for h in handles] == [1, 1, 1]


def test_a_kafka_handle_is_read_back_as_written_and_its_format_never_guessed_from_other_fields():
    h = _handle(staged_sha256="ab" * 32, record_format=3, transaction_version=1)
    assert handles_of(Vote("out", 1, 1, vote_payload([h]))) == [h]
    with pytest.raises(ValueError, match="record format 0 is unknown"):
        handle_headers(_handle(staged_sha256="ab" * 32))  # a handle not read from a vote names no format


def test_a_kafka_handle_with_fields_its_version_does_not_have_is_refused_not_read_without_them():
    raw = {**_handle(record_format=3, transaction_version=1).to_dict(), "a_field_of_the_future": 1}
    with pytest.raises(UnreadablePayload, match="a_field_of_the_future"):
        handles_of(Vote("out", 1, 1, vote_payload([]) | {"handles": [raw]}))


def test_each_participant_fails_a_newer_vote_naming_what_it_found_instead_of_misreading_it():
    newer = {PAYLOAD_VERSION: 99}
    kafka = KafkaSinkParticipant("out", "p", {"bootstrap.servers": "unused:9092"}, staging_root="/nowhere",
                                 broker=PROFILES["apache"])
    plan = Plan("p", 1, ())  # the votes are read before the plan is
    files = FileSink("out", "file:///nowhere/out")
    iceberg = IcebergTableSink("out", "p", "db.t", "conn", {})
    results = {"kafka verify": kafka.verify(Vote("out", 1, 1, newer)), "kafka commit": kafka.commit(Vote("out", 1, 1, newer)),
               "kafka abort": kafka.abort(plan, [Vote("out", 1, 1, newer)]),
               "files": files.commit(Vote("out", 1, 1, newer)), "iceberg": iceberg.commit(Vote("out", 1, 1, newer))}
    for call, result in results.items():
        kind = call.split()[0]
        assert result.outcome is Outcome.FAILED, call
        assert f"a {kind} vote payload of version 99, newer than this onceflow reads (at most version " in result.detail


def test_the_file_and_iceberg_kinds_write_votes_with_their_version():
    files = FileSink("out", "file:///nowhere/out")
    staged = FileEntry(f"{files.staging_uri(1, 1)}/part-00000.parquet", "part-00000.parquet", 10, 2, "0" * 64, 0, 0)
    vote = files.vote_for(1, 1, [staged])
    assert vote.payload[PAYLOAD_VERSION] == FILES_PAYLOAD.version
    iceberg = IcebergTableSink("out", "p", "db.t", "conn", {})
    path = attempt_dir("file:///w/t", "p", "out", 1, 5, 1) + "/f.parquet"
    vote = iceberg.vote_for(1, 5, 1, "file:///w/t", [{"path": path, "rows": 3}])
    assert vote.payload[PAYLOAD_VERSION] == ICEBERG_PAYLOAD.version
