"""Taking what a consumer has fetched, and assigning after a look-up (pure logic, on a recording stand-in)."""

from __future__ import annotations

from collections import namedtuple

from confluent_kafka import KafkaError, KafkaException

from onceflow.kafka.consume import LOOKUP_TIMEOUT_S, assign, ready

Part = namedtuple("Part", "topic partition")


class Recording:
    """Holds ``queued`` messages and ``arriving`` ones (each poll brings the next); records the calls."""

    def __init__(self, queued=(), arriving=(), lookup_fails=False):
        self.queued, self.arriving, self.lookup_fails = list(queued), list(arriving), lookup_fails
        self.calls = []

    def consume(self, num_messages, timeout):
        self.calls.append(("consume", num_messages, timeout))
        taken, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        return taken

    def poll(self, timeout):
        self.calls.append(("poll", timeout))
        if not self.arriving:
            return None
        first, *rest = self.arriving.pop(0)
        self.queued += rest
        return first

    def list_topics(self, topic, timeout):
        self.calls.append(("list_topics", topic, timeout))
        if self.lookup_fails:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    def assign(self, partitions):
        self.calls.append(("assign", partitions))

    def incremental_assign(self, partitions):
        self.calls.append(("incremental_assign", partitions))


def test_what_is_fetched_already_comes_back_without_waiting_for_a_full_batch():
    consumer = Recording(queued=["m1", "m2", "eof"])
    assert ready(consumer, 1_000, 0.2) == ["m1", "m2", "eof"]
    assert consumer.calls == [("consume", 1_000, 0)]  # librdkafka's batch wait would have taken the whole 0.2 s


def test_with_nothing_fetched_it_waits_for_the_first_message_and_takes_what_came_with_it():
    consumer = Recording(arriving=[["m1", "m2", "m3"]])
    assert ready(consumer, 2, 0.2) == ["m1", "m2"]  # never more than asked for
    assert consumer.calls == [("consume", 2, 0), ("poll", 0.2), ("consume", 1, 0)]
    assert ready(consumer, 2, 0.2) == ["m3"]


def test_nothing_within_the_wait_is_an_empty_list():
    consumer = Recording()
    assert ready(consumer, 10, 0.05) == []
    assert consumer.calls == [("consume", 10, 0), ("poll", 0.05)]


def test_assign_looks_each_topic_up_once_before_assigning():
    consumer = Recording()
    parts = [Part("a", 0), Part("a", 1), Part("b", 0)]
    looked_up: set[str] = set()
    assign(consumer, parts, looked_up)
    assert consumer.calls == [("list_topics", "a", LOOKUP_TIMEOUT_S), ("list_topics", "b", LOOKUP_TIMEOUT_S), ("assign", parts)]
    assert looked_up == {"a", "b"}
    consumer.calls.clear()
    assign(consumer, parts[:1], looked_up, incremental=True)
    # A topic this consumer has looked up is not asked for again: the planner and the commit assign again and again.
    assert consumer.calls == [("incremental_assign", parts[:1])]


def test_a_look_up_the_broker_does_not_answer_still_assigns_and_is_asked_again_next_time():
    consumer = Recording(lookup_fails=True)
    looked_up: set[str] = set()
    assign(consumer, [Part("a", 0)], looked_up)
    assert consumer.calls[-1] == ("assign", [Part("a", 0)])
    assert looked_up == set()
