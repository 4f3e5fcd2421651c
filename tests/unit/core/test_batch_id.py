"""One spelling of a batch id, everywhere."""

from __future__ import annotations

import pytest

from onceflow.sinks.files import layout
from onceflow.core.batch_id import BatchId
from onceflow.core.plan import Plan


def test_a_batch_id_is_its_number_spelled_in_ten_digits_that_sort_as_numbers():
    ids = [BatchId(n) for n in (10, 9, 123, 1)]
    assert [str(i) for i in ids] == ["0000000010", "0000000009", "0000000123", "0000000001"]
    assert sorted(str(i) for i in ids) == [str(i) for i in sorted(ids)]
    assert f"batch {BatchId(7)}" == "batch 0000000007" and f"{BatchId(7):d}" == "7"
    assert BatchId(7) == 7 and BatchId.parse("0000000007") == 7


def test_paths_and_plans_use_the_same_spelling():
    assert Plan("p", 42, ()).batch_id == str(BatchId(42))
    assert layout.batch_id(42) == "0000000042"
    assert layout.batch_dir("s3://b/w/sink", 42) == "s3://b/w/sink/batch=0000000042"


@pytest.mark.parametrize("text", ["7", "00000000070", "000000000x", ""])
def test_anything_else_is_not_a_batch_id(text):
    with pytest.raises(ValueError, match="not a batch id"):
        BatchId.parse(text)


def test_a_negative_sequence_number_is_refused():
    with pytest.raises(ValueError, match=">= 0"):
        BatchId(-1)
