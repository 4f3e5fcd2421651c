"""The Kafka sink kind (docs/brokers.md): records written in open transactions
that the commit task ends.

Call sequence of one batch, and where each step runs::

    data_source.OnceflowKafkaDataSource    Spark executors (pre-commit)
        writer.TransactionalSplitWriter -> TxnHandle, recorded in the vote
    participant.KafkaSinkParticipant.verify     commit task, before the decision
    participant.KafkaSinkParticipant.commit     commit task / recovery
        txn_protocol.end_txn(commit) -> visibility check -> repair if aborted
    participant.KafkaSinkParticipant.abort      rollback task / recovery
        txn_protocol.end_txn(abort) + fencing.fence_transactional_ids

Data moves through confluent-kafka; only FindCoordinator and EndTxn, which it
lacks, go through the small isolated ``txn_protocol`` module.
"""
