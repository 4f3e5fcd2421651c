"""The Kafka side of the protocol (docs/brokers.md).

Call sequence of one batch, and where each step runs::

    offsets.KafkaOffsetSource         plan task (Airflow worker): protocol.planning's OffsetSource
    reader.split_range, reader.read_range              Spark executors
    writer.TransactionalSplitWriter                    Spark executors (pre-commit)
        -> TxnHandle, recorded in the vote
    sink.KafkaSinkParticipant.verify                   commit task, before the decision
    sink.KafkaSinkParticipant.commit                   commit task / recovery
        txn_protocol.end_txn(commit) -> visibility check -> repair if aborted
    offsets_mirror.mirror_offsets                      commit task, after commit
    sink.KafkaSinkParticipant.abort                    rollback task / recovery
        txn_protocol.end_txn(abort) + fencing.fence_transactional_ids

Data moves through confluent-kafka; only FindCoordinator and EndTxn, which it
lacks, go through the small isolated ``txn_protocol`` module.
"""
