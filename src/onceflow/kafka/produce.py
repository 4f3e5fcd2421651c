"""Producing one record when the client's queue may be full.

librdkafka refuses ``produce`` with ``BufferError`` while its local queue is
full (``queue.buffering.max.messages`` / ``.kbytes``); the record is not
queued, and only serving delivery reports (``poll``) makes room. Every
producer of onceflow waits the same way, so a full queue never drops a record.
"""

from __future__ import annotations

from typing import Any

QUEUE_FULL_POLL_S = 0.05  # how long one wait serves delivery reports before trying again


def produce_waiting(producer: Any, topic: str, value: Any, key: Any = None, partition: int = -1,
                    **fields: Any) -> None:
    """``producer.produce(topic, value, key, partition, **fields)``, waiting while the queue is full."""
    while True:
        try:
            producer.produce(topic, value, key, partition, **fields)
            return
        except BufferError:
            producer.poll(QUEUE_FULL_POLL_S)
