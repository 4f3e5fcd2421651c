"""What each sink kind checks of a deployment before a batch is planned (pure logic)."""

from __future__ import annotations

import pytest


def test_a_transaction_timeout_above_the_brokers_maximum_fails_before_planning_naming_both():
    from onceflow.config.settings import ConfigurationError
    from onceflow.sinks.kafka.kind import check_transaction_timeout
    from onceflow.pipeline.spec import SinkSpec

    sink = SinkSpec("out", "kafka", "out", transaction_timeout_ms=900_000)
    check_transaction_timeout(sink, "900000")  # at the limit: fine
    check_transaction_timeout(sink, None)  # a broker that reports no limit: init_transactions tells
    with pytest.raises(ConfigurationError, match=r"sink 'out': transaction_timeout_ms=900000 is above the brokers' "
                                                 r"transaction.max.timeout.ms=600000: lower .* to at most 600000"):
        check_transaction_timeout(sink, "600000")


def test_reprocessing_replaces_files_republishes_declared_kafka_outputs_and_refuses_the_others():
    import dataclasses

    from onceflow.core.planning.intervals import ReprocessRefused
    from onceflow.sinks import reprocessing
    from tests.doubles.specs import ORDERS_HOURLY

    assert reprocessing(ORDERS_HOURLY) == {
        "daily_revenue": "replaced", "revenue_table": "replaced", "orders_clean": "republished",
        "orders_dead_letter": "republished"}
    *tables, enriched, dead_letters = ORDERS_HOURLY.sinks
    strict = dataclasses.replace(ORDERS_HOURLY, sinks=(
        *tables, enriched, dataclasses.replace(dead_letters, republish=False)))
    with pytest.raises(ReprocessRefused, match=r"because orders_dead_letter \(kafka: orders_hourly_dead_letter\) cannot "
                       r"take back .* SinkSpec\(republish=True\) .* Nothing was read"):
        reprocessing(strict)
