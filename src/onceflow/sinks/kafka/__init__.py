"""The Kafka sink kind (docs/brokers.md): records written in open transactions
that the commit task ends.

Call sequence of one batch, and where each step runs::

    data_source.OnceflowKafkaDataSource    Spark executors (pre-commit)
        writer.TransactionalSplitWriter -> handle.TxnHandle, recorded in the vote
        (producing, staged, withheld: its records, its staged copy, the records withheld)
    participant.KafkaSinkParticipant.verify     commit task, before the decision (verify)
    participant.KafkaSinkParticipant.commit     commit task / recovery
        commit: txn_protocol.end_txn(commit) -> visibility check (visibility, split_state,
        answers) -> repair if aborted (repair, hidden_repairs), markers if hanging (hanging)
        -> withheld records published (withheld)
    participant.KafkaSinkParticipant.abort      rollback task / recovery (abort)
        txn_protocol.end_txn(abort) + fencing.fence_transactional_ids

Each split's transactional id is derived from its pipeline, sink, batch and split (``ids``).
Data moves through confluent-kafka; only the requests it lacks (FindCoordinator,
EndTxn, DescribeTransactions, WriteTxnMarkers) go through kafka-python, in
``txn_protocol``, ``coordinators`` and ``markers``.
"""
