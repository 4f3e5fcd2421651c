"""Where keyed records go: murmur2 as Java producers place them (Kafka's own test vectors)."""

from __future__ import annotations

import zlib

import pytest

from onceflow.sinks.kafka.partitioners import partition_function
from onceflow.config.settings import ConfigurationError
from onceflow.pipeline.spec import SinkSpec

# Apache Kafka's UtilsTest.testMurmur2: Utils.murmur2(key.getBytes()) as Java returns it (signed).
JAVA_MURMUR2 = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


@pytest.mark.parametrize("count", [1, 3, 12, 1000])
def test_murmur2_places_keys_where_javas_default_partitioner_does(count):
    partition_of = partition_function("murmur2")
    for key, java in JAVA_MURMUR2.items():
        # BuiltInPartitioner.partitionForKey: Utils.toPositive(Utils.murmur2(key)) % numPartitions
        assert partition_of(key.encode(), count) == (java & 0x7FFFFFFF) % count, key


def test_crc32_places_keys_as_librdkafka_does():
    assert partition_function("crc32")(b"foobar", 7) == zlib.crc32(b"foobar") % 7


def test_an_unknown_partitioner_or_one_on_another_kind_fails_naming_the_option_and_the_choices():
    with pytest.raises(ConfigurationError, match="option partitioner='java' is not valid: use one of crc32, murmur2"):
        SinkSpec("out", "kafka", "topic", options={"partitioner": "java"})
    with pytest.raises(ConfigurationError, match=r"option\(s\) partitioner are not options of a files sink \(it takes none\)"):
        SinkSpec("out", "files", "path", options={"partitioner": "murmur2"})
    with pytest.raises(ConfigurationError, match=r"option\(s\) acks are not options of a kafka sink \(it takes partitioner\)"):
        SinkSpec("out", "kafka", "topic", options={"acks": "all"})
