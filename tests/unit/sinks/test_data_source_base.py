"""The sinks' data-source base without a Spark session: what the driver refuses, and what reaches a
kind's ``vote`` and ``discard`` (a task attempt's own run is tests/integration/spark/test_stage_retry.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import LongType, StructField, StructType

from onceflow.core.participant import Vote
from onceflow.sinks.data_source_base import PreCommitSource, PreCommitWriter, WriteOptions
from onceflow.sinks.votes import read_recorded_vote

SCHEMA = StructType([StructField("id", LongType())])
JOB = {"pipeline": "p", "deployment": "{}", "sink": "out", "batch_seq": "3", "planned_at_ms": "1000", "attempt": "2"}


@dataclass(frozen=True)
class Counted(WriterCommitMessage):
    rows: int


class CountingWriter(PreCommitWriter[Counted]):
    discarded: list[Counted] = []

    def vote(self, messages):
        return Vote(self.options.sink, self.options.batch_seq, self.options.attempt, {}, records=sum(m.rows for m in messages))

    def discard(self, messages):
        CountingWriter.discarded = messages


class CountingSource(PreCommitSource):
    format = "counting"
    writes = "counts rows"
    required = ("sink", "batch_seq", "attempt")
    writer_type = CountingWriter


def test_overwrite_is_refused_in_the_kinds_own_words():
    with pytest.raises(ValueError, match=r"counting counts rows and never overwrites: use \.mode\('append'\)"):
        CountingSource(JOB).writer(SCHEMA, overwrite=True)


def test_the_driver_refuses_options_the_write_could_not_vote_with():
    with pytest.raises(ValueError, match="missing option\\(s\\) batch_seq, attempt"):
        CountingSource({"sink": "out"}).writer(SCHEMA, overwrite=False)
    with pytest.raises(ValueError, match="give options 'pipeline' and 'deployment'.*or 'vote_path'"):
        CountingSource({"sink": "out", "batch_seq": "3", "attempt": "2"}).writer(SCHEMA, overwrite=False)
    with pytest.raises(ValueError, match="option planned_at_ms='soon' is not an integer"):
        CountingSource({**JOB, "planned_at_ms": "soon"}).writer(SCHEMA, overwrite=False)


def test_the_job_options_read_as_their_types_whatever_case_spark_gave_their_names():
    options = WriteOptions.checked("counting", {**JOB, "Replaces": "1"}, ("sink",))
    assert (options.sink, options.batch_seq, options.batch_id, options.attempt) == ("out", 3, "0000000003", 2)
    assert (options.planned_at_ms, options.replaces, options.faults) == (1000, 1, "")


def test_the_vote_and_the_discard_get_the_messages_of_tasks_that_sent_one(tmp_path):
    vote_path = str(tmp_path / "vote.json")
    writer = CountingSource({"sink": "out", "batch_seq": "3", "attempt": "2", "vote_path": vote_path}).writer(SCHEMA, False)
    writer.commit([Counted(4), None, Counted(5)])
    assert read_recorded_vote(vote_path).records == 9
    writer.abort([None, Counted(4)])
    assert CountingWriter.discarded == [Counted(4)]
