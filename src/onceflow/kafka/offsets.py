"""Where input partitions stand: the planner's view of Kafka.

Runs on an Airflow worker (plan task) and in the audit. ``KafkaOffsetSource``
implements ``onceflow.core.planning.source.OffsetSource``; the planning rules
(start where the last committed batch ended, ``end = min(last stable offset,
start + max records per partition)``, new partitions from the start position,
offsets lost to retention fail the plan) live in ``core.planning`` only.

The last stable offset (LSO) is taken from a read_committed FETCH, on every
broker: the consumer fetches the first records of each partition, a few
partitions at a time (one small fetch each; Tansu ignores the size limits and
returns its first stored batch), and reads the LastStableOffset the broker put
in the fetch response from the client's statistics (``ls_offset``). One code path,
because ListOffsets(read_committed) is wrong on Tansu 0.6 (measured: 150
records -> "1"; an open transaction -> "0") while its fetch responses carry
the right LSO, as Apache Kafka's and noida-db's do. Not the cached high
watermark: librdkafka caches the fetch's *high watermark* there, which
includes open transactions (measured on both brokers: 5 committed + 3 open
records -> cached high 9, LSO 6). A range therefore never reaches into a
transaction still open upstream: the LSO stays before its first record until
it ends (and, as in Apache Kafka, before any record written after it).

Earliest offsets come from ListOffsets(earliest), right on both brokers.
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition as KafkaTopicPartition,
    TopicCollection,
)
from confluent_kafka.admin import AdminClient

from onceflow.core.plan import OffsetRange
from onceflow.core.planning.source import TopicPartition
from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import ASSIGN_ONLY_GROUP, client_config, consumer_config
from onceflow.kafka.consume import assign, ready
from onceflow.kafka.reader import read_range

STATS_INTERVAL_MS = 50
# How long one wait for the next statistics sample lasts: poll() serves the statistics callback but
# returns only at a message or its timeout, and consume(n, t) waits t out unless n messages come.
SAMPLE_POLL_S = 0.005
FETCH_WINDOW = 4  # partitions fetched at once


class OffsetLookupError(KafkaException):
    """A partition's offsets could not be learned in time; the message names the partitions."""


def stable_offsets_from_stats(sample: str, topic: str) -> dict[int, int]:
    """Per partition of ``topic``: the last stable offset of the latest fetch response
    in one librdkafka statistics sample (``-1001`` before any fetch)."""
    partitions = json.loads(sample).get("topics", {}).get(topic, {}).get("partitions", {})
    return {int(p): int(v.get("ls_offset", -1001)) for p, v in partitions.items() if int(p) >= 0}


class KafkaOffsetSource:
    """Offsets of input partitions, through one read_committed consumer. Use as a context manager.

    Not thread-safe. Every call asks the broker again (nothing is cached
    between calls), so a caller may poll ``last_stable_offsets``.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 30.0):
        self.timeout_s = timeout_s
        self._config = dict(config)
        self._samples: list[str] = []
        self._looked_up: set[str] = set()  # topics whose metadata this consumer has asked for (consume.assign)
        self._consumer = Consumer(
            consumer_config(
                config,
                **{
                    "enable.partition.eof": True,
                    "auto.offset.reset": "earliest",
                    "statistics.interval.ms": STATS_INTERVAL_MS,
                    "stats_cb": self._samples.append,
                    # One fetch per partition is enough: do not prefetch logs.
                    "max.partition.fetch.bytes": 1024,
                    "queued.min.messages": 1,
                    "fetch.queue.backoff.ms": 10,
                    "fetch.wait.max.ms": 50,
                },
            )
        )

    def __enter__(self) -> "KafkaOffsetSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def partitions(self, topics: Sequence[str]) -> list[TopicPartition]:
        found = []
        for topic in topics:
            meta = self._consumer.list_topics(topic, timeout=self.timeout_s).topics.get(topic)
            if meta is not None and meta.error is not None:
                self._check(meta.error.code(), f"the partitions of topic {topic}", topic)
            if meta is None or meta.error is not None or not meta.partitions:
                reason = meta.error if meta is not None and meta.error is not None else "no partitions"
                raise KafkaException(f"input topic {topic!r} is not readable ({reason}): create it or fix the pipeline's topics")
            found.extend(TopicPartition(topic, p) for p in sorted(meta.partitions))
            self._looked_up.add(topic)
        return found

    def topic_ids(self, topics: Sequence[str]) -> dict[str, str]:
        """Kafka's topic UUIDs (KIP-516); brokers that report none (the all-zero id) are left out."""
        admin = AdminClient({k: v for k, v in client_config(self._config).items() if not callable(v)})
        found = {}
        for topic, future in admin.describe_topics(TopicCollection(list(topics)), request_timeout=self.timeout_s).items():
            try:
                topic_id = str(future.result(timeout=self.timeout_s).topic_id)
            except KafkaException as exc:
                self._check(exc.args[0].code(), f"the id of topic {topic}", topic)
                raise
            if topic_id.strip("A=") and topic_id != "None":
                found[topic] = topic_id
        return found

    def topic_ranges(self, topic: str) -> list[OffsetRange]:
        """Every partition of ``topic`` from its first record to its last stable offset: all a reader sees."""
        partitions = self.partitions([topic])
        earliest, stable = self.earliest_offsets(partitions), self.last_stable_offsets(partitions)
        return [OffsetRange(topic, tp.partition, earliest[tp], stable[tp]) for tp in partitions]

    def _check(self, code: int, doing: str, topic: str | None) -> None:
        """Raise ``NotAuthorized`` for a refusal (``onceflow.kafka.refusals``): this consumer reads ``topic``
        and carries the assign()-only readers' group."""
        refusals.check(self._config, code, f"reading {doing}",
                       {Resource.TOPIC: ("READ", topic or "?"), Resource.GROUP: ("DESCRIBE", ASSIGN_ONLY_GROUP)})

    def earliest_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        found = {}
        for tp in partitions:
            try:
                found[tp] = self._consumer.get_watermark_offsets(
                    KafkaTopicPartition(tp.topic, tp.partition), timeout=self.timeout_s, cached=False)[0]
            except KafkaException as exc:
                self._check(exc.args[0].code(), f"the first offset of {tp.topic}[{tp.partition}]", tp.topic)
                raise
        return found

    def timestamps_at(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """The timestamp (epoch ms) of the record at each offset; None where
        there is no committed record there (yet) or it did not come in time."""
        found: dict[TopicPartition, int | None] = {}
        deadline = time.monotonic() + self.timeout_s  # for all of them together
        for tp, offset in offsets.items():
            assign(self._consumer, [KafkaTopicPartition(tp.topic, tp.partition, offset)], self._looked_up)
            found[tp] = None
            try:
                while time.monotonic() < deadline:
                    msg = self._consumer.poll(0.2)
                    if msg is None:
                        continue
                    if msg.error() is None:
                        found[tp] = msg.timestamp()[1]
                    break  # a record, or partition EOF / an error: either way done with it
            finally:
                self._consumer.unassign()
        return found

    def last_stable_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The LastStableOffset of a fresh read_committed fetch of each partition.

        Assigns the partitions at their beginning, ``FETCH_WINDOW`` at a
        time, until each has returned a record or a partition-EOF (so a fetch
        response for it has been processed; it is then unassigned), then
        takes the next statistics sample, which is
        generated after those responses. A stale value could only be lower
        (the LSO never decreases), so an error here costs progress, never
        correctness. Raises ``OffsetLookupError`` naming the partitions that
        did not answer within ``timeout_s``.
        """
        if not partitions:
            return {}
        consumer = self._consumer
        queue = list(partitions)
        fetching: set[TopicPartition] = set()
        try:
            deadline = time.monotonic() + self.timeout_s
            while (queue or fetching) and time.monotonic() < deadline:
                # A few partitions at a time: Tansu answers a fetch of many partitions with
                # records of the first ones only, whatever the size limits (measured).
                added = queue[: FETCH_WINDOW - len(fetching)]
                del queue[: len(added)]
                if added:
                    assign(consumer, [KafkaTopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in added],
                           self._looked_up, incremental=True)
                    fetching.update(added)
                for m in ready(consumer, 100, 0.05):
                    error = m.error()
                    if error is not None and error.code() != KafkaError._PARTITION_EOF:
                        self._check(error.code(), f"{m.topic()}[{m.partition()}] for its last stable offset" if m.topic()
                                    else "the last stable offsets", m.topic() or ", ".join(sorted({tp.topic for tp in partitions})))
                        raise OffsetLookupError(
                            f"fetching {m.topic()}[{m.partition()}] for its last stable offset failed: {error}"
                        )
                    tp = TopicPartition(m.topic(), m.partition())
                    if tp in fetching:  # a fetch response for it has been processed
                        fetching.discard(tp)
                        consumer.incremental_unassign([KafkaTopicPartition(tp.topic, tp.partition)])
            if queue or fetching:
                raise OffsetLookupError(self._late(set(queue) | fetching, "returned no fetch response"))
            # Samples already delivered may predate the fetch responses: only a later one counts.
            self._samples.clear()
            stable: dict[TopicPartition, int] = {}
            while len(stable) < len(partitions) and time.monotonic() < deadline:
                consumer.poll(SAMPLE_POLL_S)  # every partition is unassigned: no record comes, only samples
                for sample in self._samples:
                    stable = self._read_sample(sample, partitions)
                self._samples.clear()
            if len(stable) < len(partitions):
                raise OffsetLookupError(self._late(set(partitions) - set(stable), "reported no last stable offset"))
            return stable
        finally:
            consumer.unassign()

    @staticmethod
    def _read_sample(sample: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        by_topic = {topic: stable_offsets_from_stats(sample, topic) for topic in {tp.topic for tp in partitions}}
        found = {tp: by_topic[tp.topic].get(tp.partition, -1001) for tp in partitions}
        return found if all(v >= 0 for v in found.values()) else {}

    def _late(self, partitions: set[TopicPartition], what: str) -> str:
        names = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(partitions))
        return (
            f"{names} {what} within {self.timeout_s:.0f}s, so their last stable offset is unknown and no batch "
            "can be planned: check that the broker leading them is up (and the consumer's access to the topic), "
            "then re-run the plan task"
        )

    def offsets_for_timestamp(self, partitions: Sequence[TopicPartition], timestamp_ms: int) -> dict[TopicPartition, int]:
        """First offset whose timestamp is >= ``timestamp_ms``; the last stable offset if none is.

        The broker's answer (ListOffsets by timestamp) is checked by reading
        from it: Tansu 0.6 answers the log start for any timestamp, even one
        after every record (measured). Reading forward from the answer to the
        first committed record at or after ``timestamp_ms`` corrects an answer
        that is too early; on a broker that answers right, the first record
        read settles it. An answer that is too late cannot be detected this
        way (none was seen on either broker).
        """
        query = [KafkaTopicPartition(tp.topic, tp.partition, timestamp_ms) for tp in partitions]
        stable = self.last_stable_offsets(partitions)
        result = {}
        for tp, found in zip(partitions, self._consumer.offsets_for_times(query, timeout=self.timeout_s)):
            if found.error is not None:
                raise KafkaException(found.error)
            answer = found.offset if 0 <= found.offset < stable[tp] else stable[tp]
            result[tp] = self._first_at_or_after(OffsetRange(tp.topic, tp.partition, answer, stable[tp]), timestamp_ms)
        return result

    def _first_at_or_after(self, rng: OffsetRange, timestamp_ms: int) -> int:
        """The offset of the first committed record of ``rng`` stamped >= ``timestamp_ms``, else ``rng.end``."""
        for batch in read_range(self._config, rng, batch_size=1000, timeout_s=self.timeout_s):
            stamps = batch.column("timestamp").cast(pa.int64())
            late = pc.greater_equal(stamps, timestamp_ms)
            if pc.any(late).as_py():
                return batch.column("offset")[pc.index(late, True).as_py()].as_py()
        return rng.end
