"""The one digesting writer the file sink and the Kafka sink write through."""

from __future__ import annotations

import hashlib
import io

import pyarrow as pa
import pyarrow.parquet as pq

from onceflow.storage import DigestingWriter


def test_what_passes_through_is_forwarded_counted_and_hashed_and_the_target_stays_open():
    target = io.BytesIO()
    writer = DigestingWriter(target)
    for chunk in (b"abc", bytearray(b"de"), memoryview(b"fgh")):
        writer.write(chunk)
    writer.close()
    assert target.getvalue() == b"abcdefgh" and not target.closed and writer.closed
    assert writer.size == writer.tell() == 8
    assert writer.hexdigest() == hashlib.sha256(b"abcdefgh").hexdigest()


def test_a_parquet_file_written_through_it_has_the_size_and_digest_it_reports():
    target = io.BytesIO()
    writer = DigestingWriter(target)
    pq.write_table(pa.table({"n": list(range(1000))}), writer)
    data = target.getvalue()
    assert writer.size == len(data) and writer.hexdigest() == hashlib.sha256(data).hexdigest()
    assert pq.read_table(io.BytesIO(data)).num_rows == 1000
