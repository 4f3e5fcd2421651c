"""Finishing a hanging transaction: the COMMIT marker its coordinator dropped.

Runs on an Airflow worker (commit task). Apache Kafka drops the markers of a
partition whose leader died as the transaction ended, and the transaction
hangs there while its coordinator reports CompleteCommit (docs/brokers.md,
"Hanging transactions"). ``write_commit_markers`` finishes it as its
coordinator should have: a COMMIT marker, written to the partition
(WriteTxnMarkers, as ``kafka-transactions.sh abort`` writes an ABORT one).
``open_transactions`` names what else holds a partition's last stable offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from confluent_kafka.admin import AdminClient
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, NodeNotReadyError, RequestTimedOutError
from kafka.net.compat import KafkaNetClient
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaTopicPartition

from onceflow.kafka import refusals
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import kafka_python_config, client_config
from onceflow.sinks.kafka.broker_answers import classify


@dataclass(frozen=True)
class MarkerOutcome:
    """What writing a COMMIT marker to one partition came to."""

    written: bool = False
    refused: str | None = None  # the broker's error, or why nothing answered
    # Not written because the transaction is not open there: the other transactions open in the partition.
    holders: tuple[str, ...] = ()

    @property
    def not_open(self) -> bool:
        return not self.written and self.refused is None

    def __str__(self) -> str:
        if self.written:
            return "written"
        if self.refused:
            return self.refused
        return "not open" + (f"; held back by {', '.join(self.holders)}" if self.holders else "")


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction open in a partition (DescribeProducers): it holds the partition's last stable offset."""

    producer_id: int
    producer_epoch: int
    start_offset: int

    def __str__(self) -> str:
        return f"producer {self.producer_id} since offset {self.start_offset}"


def open_transactions(config: Mapping[str, Any], topic: str, partitions: Sequence[int],
                      timeout_s: float = 30.0) -> dict[int, tuple[OpenTransaction, ...]]:
    """Per partition of ``topic``, the transactions open in it (DescribeProducers: READ on the topic)."""
    admin = KafkaAdminClient(**kafka_python_config(config), request_timeout_ms=int(min(timeout_s, 30) * 1000))
    try:
        described = admin.describe_producers([KafkaTopicPartition(topic, p) for p in partitions])
    except KafkaError as exc:
        refusals.check_exception(config, exc, "DescribeProducers of the partitions an open transaction holds",
                                 {Resource.TOPIC: ("READ", topic)})
        raise
    finally:
        admin.close()
    return {tp.partition: tuple(OpenTransaction(p.producer_id, p.producer_epoch, p.current_transaction_start_offset)
                                for p in state.active_producers if p.current_transaction_start_offset >= 0)
            for tp, state in described.items()}


def write_commit_markers(config: Mapping[str, Any], topic: str, partitions: Sequence[int], producer_id: int,
                         producer_epoch: int, timeout_s: float = 30.0) -> dict[int, MarkerOutcome]:
    """Write a COMMIT marker for the transaction (producer id, epoch) to each of ``partitions`` that
    still holds it open; partition -> what happened (where it is not open: which other open
    transactions hold the partition's stable end back).

    Only for a transaction its coordinator reports CompleteCommit: that is the decision the marker
    carries. The partition leader checks the producer id and epoch (a fenced or newer epoch is
    refused), and takes coordinator epoch -1 as an operator's marker, as Kafka's own admin abort
    does. Writing markers needs ALTER or CLUSTER_ACTION on the cluster (an optional grant of
    ``onceflow.kafka.acls``); its refusal is an answer like any other, naming the principal.
    """
    timeout_ms = int(min(timeout_s, 30) * 1000)
    settings = kafka_python_config(config)
    holders = open_transactions(config, topic, partitions, timeout_s)
    ours = (producer_id, producer_epoch)
    open_in = [p for p, txns in holders.items() if any((t.producer_id, t.producer_epoch) == ours for t in txns)]
    others = {p: tuple(str(t) for t in txns if (t.producer_id, t.producer_epoch) != ours) for p, txns in holders.items()}
    outcome = {p: MarkerOutcome(holders=others.get(p, ())) for p in partitions if p not in open_in}
    if not open_in:
        return outcome
    leaders = AdminClient(client_config(config)).list_topics(topic, timeout=timeout_s).topics[topic].partitions
    marker = WriteTxnMarkersRequest.WritableTxnMarker
    client = KafkaNetClient(**settings, request_timeout_ms=timeout_ms)
    try:
        client.get_broker_version(timeout_ms)
        for partition in open_in:
            request = WriteTxnMarkersRequest(markers=[marker(
                producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=True,
                topics=[marker.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])], coordinator_epoch=-1)])
            reply = client.send_and_receive(leaders[partition].leader, request, timeout_ms=timeout_ms)
            code = next(p.error_code for m in reply.markers for t in m.topics for p in t.partitions)
            refused = refusals.refusal(config, code, "WriteTxnMarkers: the commit marker its coordinator dropped",
                                       {Resource.CLUSTER: ("ALTER or CLUSTER_ACTION", "")})
            outcome[partition] = (MarkerOutcome(written=True) if code == 0 else
                                  MarkerOutcome(refused=str(refused) if refused else classify(code)[0]))
    except (KafkaConnectionError, ConnectionError, KafkaTimeoutError, RequestTimedOutError, NodeNotReadyError) as exc:
        outcome.update({p: MarkerOutcome(refused=f"no answer ({type(exc).__name__})") for p in open_in if p not in outcome})
    finally:
        client.close()
    return outcome
