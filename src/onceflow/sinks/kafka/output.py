"""One Kafka output topic of a pipeline, as each commit-side job sees it (verify, commit, repair, abort).

Built by ``participant.KafkaSinkParticipant`` on an Airflow worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from onceflow.config.broker_profiles import BrokerProfile
from onceflow.config.warehouse_layout import kafka_staging_dir
from onceflow.sinks.kafka.handle import TxnHandle
from onceflow.sinks.kafka.txn_protocol import EndTxnReply, end_txns
from onceflow.storage import Storage


@dataclass(frozen=True)
class KafkaOutput:
    name: str
    pipeline: str
    config: Mapping[str, Any]
    staging_root: str
    storage: Storage
    transaction_timeout_ms: int
    safety_fraction: float
    timeout_s: float
    broker: BrokerProfile

    @property
    def max_vote_age_ms(self) -> int:
        return int(self.transaction_timeout_ms * self.safety_fraction)

    def end_txns(self, handles: Sequence[TxnHandle], commit: bool) -> list[EndTxnReply]:
        return end_txns(self.config, [h.identity for h in handles], commit, self.timeout_s,
                        concurrent=self.broker.concurrent_end_txn)

    def staged_exists(self, h: TxnHandle) -> bool:
        return self.storage.size(h.staged_uri) is not None

    def delete_staging(self, batch_id: str) -> None:
        self.storage.delete_tree(kafka_staging_dir(self.staging_root, self.pipeline, self.name, batch_id))
