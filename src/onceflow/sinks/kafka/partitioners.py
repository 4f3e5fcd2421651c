"""Which partition a keyed record goes to. The writer chooses before it produces,
so the staged copy knows where every record went (and a repair puts it back there).

- ``crc32``: CRC32 of the key modulo the partition count, as librdkafka's default
  partitioner places keyed records;
- ``murmur2``: murmur2 of the key, made positive, modulo the count, as Java
  producers (and Kafka Streams, and Flink's Kafka sink) place them by default:
  a topic onceflow writes is then co-partitioned with one they write.

Records without a key go round-robin, whichever is chosen. Runs on executors.
"""

from __future__ import annotations

import zlib
from typing import Callable

from onceflow.config.settings import ConfigurationError

KeyHash = Callable[[bytes], int]  # key -> a non-negative hash; its partition is the hash modulo the count
PartitionOf = Callable[[bytes, int], int]  # (key, partition count) -> partition


def _crc32() -> KeyHash:
    return zlib.crc32


def _murmur2() -> KeyHash:
    from kafka.partitioner.default import murmur2  # kafka-python's port of Java's Utils.murmur2

    return lambda key: murmur2(key) & 0x7FFFFFFF


PARTITIONERS: dict[str, Callable[[], KeyHash]] = {"crc32": _crc32, "murmur2": _murmur2}
DEFAULT = "crc32"


def key_hash(name: str, what: str = "partitioner") -> KeyHash:
    """The partitioner's hash: the writer maps a batch's keys through it at once (``map``), with no
    Python call per key for crc32."""
    if name not in PARTITIONERS:
        raise ConfigurationError(f"{what} {name!r} is not known: use one of {', '.join(sorted(PARTITIONERS))} "
                                 "(murmur2: as Java producers place keyed records)")
    return PARTITIONERS[name]()


def partition_function(name: str, what: str = "partitioner") -> PartitionOf:
    hash_of = key_hash(name, what)
    return lambda key, count: hash_of(key) % count


class SplitPartitioner:
    """Where one split's records go in a topic of ``partition_count`` partitions: keyed ones by the
    partitioner's hash, the others round-robin."""

    def __init__(self, name: str, what: str = "partitioner") -> None:
        self._key_hash = key_hash(name, what)
        self._round_robin = 0
        self.partition_count = 0  # set once the topic is looked up

    def partition_for(self, key: bytes | None) -> int:
        if key is not None:
            return self._key_hash(key) % self.partition_count
        self._round_robin = (self._round_robin + 1) % self.partition_count
        return self._round_robin

    def partitions_for(self, keys: list) -> list[int]:
        n = self.partition_count
        if None not in keys:
            return [h % n for h in map(self._key_hash, keys)]
        return [self.partition_for(k) for k in keys]
