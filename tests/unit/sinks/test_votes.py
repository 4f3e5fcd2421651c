"""Every kind's vote takes one route, and arrives whole."""

from __future__ import annotations

import pytest

from onceflow.core.participant import Vote
from onceflow.sinks.votes import read_recorded_vote, record_vote


def test_a_vote_recorded_outside_a_pipeline_keeps_what_it_withheld_and_what_it_replaces(tmp_path):
    # The Kafka kind withholds records a topic cannot take; an interval's reprocessing replaces a batch.
    vote = Vote("enriched", 7, 2, {"handles": [{"split": 0}]}, records=40, withheld=3, replaces=5)
    path = (tmp_path / "vote.json").as_uri()
    record_vote({"vote_path": path}, vote)
    assert read_recorded_vote(path) == vote


def test_an_attempt_votes_once_and_a_vote_with_nowhere_to_go_is_refused(tmp_path):
    path = (tmp_path / "vote.json").as_uri()
    record_vote({"vote_path": path}, Vote("counts", 1, 1, records=2))
    with pytest.raises(FileExistsError, match="a batch attempt votes once"):
        record_vote({"vote_path": path}, Vote("counts", 1, 1, records=3))
    with pytest.raises(ValueError, match="writer option 'vote_path' is not set"):
        record_vote({}, Vote("counts", 1, 1))
