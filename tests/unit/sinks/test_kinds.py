"""What each sink kind checks of a deployment before a batch is planned (pure logic)."""

from __future__ import annotations

import pytest


def test_a_transaction_timeout_above_the_brokers_maximum_fails_before_planning_naming_both():
    from onceflow.settings import ConfigurationError
    from onceflow.sinks.kafka import check_transaction_timeout
    from onceflow.spec import SinkSpec

    sink = SinkSpec("out", "kafka", "out", transaction_timeout_ms=900_000)
    check_transaction_timeout(sink, "900000")  # at the limit: fine
    check_transaction_timeout(sink, None)  # a broker that reports no limit: init_transactions tells
    with pytest.raises(ConfigurationError, match=r"sink 'out': transaction_timeout_ms=900000 is above the brokers' "
                                                 r"transaction.max.timeout.ms=600000: lower .* to at most 600000"):
        check_transaction_timeout(sink, "600000")
