"""Sample click events for the demo, benchmarks and tests, malformed ones included.

Pure Python and deterministic by seed: the same ``(n, seed)`` always gives
the same records, and each record carries the dead-letter ``reason`` the
pipeline must give it (None for a valid event), so tests can check the
transform against an independent answer.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

PAGES = ("/", "/search", "/cart", "/checkout", "/product/1", "/product/2", "/product/3", "/help")
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class ClickRecord:
    key: bytes | None
    value: bytes | None
    reason: str | None  # what the pipeline must say; None = valid event


def _event(rng: random.Random, i: int, seed: int) -> dict:
    return {
        "event_id": f"e-{seed}-{i}",
        "user_id": f"u-{rng.randrange(1000)}",
        "page": rng.choice(PAGES),
        "ts": START_MS + i * 37 + rng.randrange(1000),
        "amount": round(rng.uniform(0, 200), 2) if rng.random() < 0.5 else rng.randrange(100),
    }


def _malformed(rng: random.Random, event: dict) -> tuple[bytes | None, str]:
    """One malformed payload of a random kind, with the reason it must get."""
    kind = rng.randrange(9)
    if kind == 0:
        return json.dumps(event).encode()[: rng.randrange(1, 20)], "bad_json"
    if kind == 1:
        return b"\xff\xfe not text", "bad_json"
    if kind == 2:
        return json.dumps([event]).encode(), "not_a_json_object"
    if kind == 3:
        field = rng.choice(list(event))
        broken = {k: v for k, v in event.items() if k != field}
        return json.dumps(broken).encode(), f"missing_field:{field}"
    if kind == 4:
        field = rng.choice(list(event))
        return json.dumps({**event, field: None}).encode(), f"missing_field:{field}"
    if kind == 5:
        return json.dumps({**event, "amount": str(event["amount"])}).encode(), "wrong_type:amount"
    if kind == 6:
        return json.dumps({**event, "ts": event["ts"] + 0.5}).encode(), "wrong_type:ts"
    if kind == 7:
        return json.dumps({**event, "page": 404}).encode(), "wrong_type:page"
    return json.dumps({**event, "ts": -event["ts"]}).encode(), "out_of_range:ts"


def generate(n: int, seed: int = 0, malformed_ratio: float = 0.05) -> list[ClickRecord]:
    """``n`` records, about ``malformed_ratio`` of them malformed."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        event = _event(rng, i, seed)
        key = event["event_id"].encode()
        if rng.random() < malformed_ratio:
            value, reason = _malformed(rng, event)
            out.append(ClickRecord(key, value, reason))
        else:
            out.append(ClickRecord(key, json.dumps(event).encode(), None))
    return out


def as_kafka_records(records: list[ClickRecord], topic: str = "clicks", partitions: int = 2):
    """A pyarrow table shaped like a read of ``topic``: round-robin partitions,
    offsets from 0 per partition, record timestamps START_MS onwards."""
    import pyarrow as pa

    next_offset = [0] * partitions
    part, offsets = [], []
    for i in range(len(records)):
        p = i % partitions
        part.append(p)
        offsets.append(next_offset[p])
        next_offset[p] += 1
    return pa.table(
        {
            "key": pa.array([r.key for r in records], pa.binary()),
            "value": pa.array([r.value for r in records], pa.binary()),
            "topic": pa.array([topic] * len(records), pa.string()),
            "partition": pa.array(part, pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array([START_MS + i for i in range(len(records))], pa.timestamp("ms", tz="UTC")),
        }
    )


# A producer setting that lets an oversized() input record through (Kafka's topics take 1,048,588 bytes).
OVERSIZED_PRODUCER = {"message.max.bytes": 1_040_000}


def oversized(record: ClickRecord) -> ClickRecord:
    """A valid event (``record``'s, which must be valid) whose input record fits its topic but whose
    enriched record (the event and a little more) is over a producer's default 1,000,000 bytes."""
    event = json.loads(record.value)
    event["page"] = "/" + "p" * 1_020_000
    return ClickRecord(record.key, json.dumps(event).encode(), None)


def produce(config: dict, topic: str, records: list[ClickRecord], partitions: int = 2, flush_timeout_s: float = 120.0,
            timestamps: list[int] | None = None, partition: int | None = None) -> int:
    """Send ``records`` to ``topic`` round-robin over ``partitions`` (record i to
    partition i % partitions, as ``as_kafka_records`` lays them out), or all to
    ``partition``, with a plain producer: the demo's, tests' and benchmarks'
    upstream; record i is stamped ``timestamps[i]`` (epoch ms) when given, else
    now. Returns the count; raises if any record is still unsent after
    ``flush_timeout_s``, and raises ``NotDelivered`` (with the count delivered) if the broker
    refused any: a record is counted only once its delivery report says it is in the topic."""
    from confluent_kafka import Producer

    from onceflow.kafka.produce import produce_waiting

    producer = Producer(dict(config))
    errors: list = []

    def delivered(error, _message) -> None:
        if error is not None:
            errors.append(error)

    for i, r in enumerate(records):
        stamp = {"timestamp": timestamps[i]} if timestamps is not None else {}
        produce_waiting(producer, topic, r.value, r.key, i % partitions if partition is None else partition,
                        on_delivery=delivered, **stamp)
    unsent = producer.flush(flush_timeout_s)
    if unsent:
        raise RuntimeError(f"{topic}: {unsent} records still unsent after {flush_timeout_s:.0f} s")
    if errors:
        raise NotDelivered(topic, len(records) - len(errors), len(errors), errors[0])
    return len(records)


class NotDelivered(RuntimeError):
    """The broker refused some records (their delivery reports carry an error); ``delivered`` are in the topic."""

    def __init__(self, topic: str, delivered: int, failed: int, first_error):
        super().__init__(f"{topic}: {failed} record(s) not delivered ({first_error}); {delivered} delivered")
        self.delivered = delivered
