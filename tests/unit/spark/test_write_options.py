"""The Kafka data source's options, as the driver hands them to executors (pure parsing)."""

from __future__ import annotations

import json

import pytest

from onceflow.sinks.kafka.data_source import KafkaWriteOptions
from onceflow.sinks.writer_options import FAULTS_OPTION

BASE = {"pipeline": "p", "deployment": "{}", "sink": "out", "topic": "t", "batch_seq": "3", "attempt": "2", "splits": "2",
        "transactional_ids": json.dumps(["a", "b"]), "transaction_timeout_ms": "60000"}


def test_every_option_lands_in_its_own_field():
    opts = KafkaWriteOptions.parse({**BASE, "max_record_bytes": "1000", "partitioner": "murmur2",
                                    FAULTS_OPTION: "kafka.precommit.after_flush=raise"})
    assert (opts.partitioner, opts.faults, opts.max_record_bytes) == ("murmur2", "kafka.precommit.after_flush=raise", 1000)
    assert (opts.batch_seq, opts.attempt, opts.transactional_ids) == (3, 2, ("a", "b"))


def test_without_a_partitioner_keys_go_as_librdkafka_puts_them():
    assert KafkaWriteOptions.parse(BASE).partitioner == "crc32"


def test_the_guarantee_and_the_plans_ids_must_agree():
    # An exactly_once output without ids could not be fenced; ids on another would be fenced for nothing.
    assert KafkaWriteOptions.parse({**BASE, "guarantee": "at_least_once", "transactional_ids": "[]"}).guarantee == "at_least_once"
    for wrong in ({"guarantee": "at_least_once"}, {"transactional_ids": "[]"}, {"guarantee": "twice"}):
        with pytest.raises(ValueError, match="transactional ids"):
            KafkaWriteOptions.parse({**BASE, **wrong})
