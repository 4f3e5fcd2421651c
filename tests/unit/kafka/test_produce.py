"""A record refused while the client's queue is full waits for room: produced once, never dropped."""

from __future__ import annotations

from onceflow.kafka.produce import QUEUE_FULL_POLL_S, produce_waiting


class _QueueFullTwice:
    """A producer whose queue is full for its first two calls (pure logic: the client's BufferError)."""

    def __init__(self):
        self.calls, self.polls, self.queued = 0, [], []

    def produce(self, *args, **fields):
        self.calls += 1
        if self.calls <= 2:
            raise BufferError("Local: Queue full")
        self.queued.append((args, fields))

    def poll(self, timeout):
        self.polls.append(timeout)


def test_a_refused_record_is_produced_once_after_serving_delivery_reports():
    producer = _QueueFullTwice()
    produce_waiting(producer, "out", b"v", b"k", 2, headers=[("h", b"1")], on_delivery=print)
    assert producer.polls == [QUEUE_FULL_POLL_S, QUEUE_FULL_POLL_S]
    assert producer.queued == [(("out", b"v", b"k", 2), {"headers": [("h", b"1")], "on_delivery": print})]
