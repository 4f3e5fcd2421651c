"""Derived transactional ids, client settings and secret redaction (pure logic)."""

from __future__ import annotations

import pytest

from onceflow.kafka.config import (REDACTED, RECEIVE_MESSAGE_MAX_BYTES, client_config, consumer_config, kafka_python_config,
                                   producer_config, redact)
from onceflow.core.plan import TXN_ID_POOL
from onceflow.sinks.kafka.ids import is_split_id, own_ids, pooled_id, repair_id, transactional_id, transactional_ids
from onceflow.sinks.kafka.txn_protocol import ACTIONS
from onceflow.sinks.kafka.broker_answers import Action, classify, CONNECTION_CLOSED
from onceflow.config.settings import ConfigurationError

SECURE = {
    "bootstrap.servers": "b1:9093,b2:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "etl",
    "sasl.password": "hunter2",
    "ssl.ca.location": "/etc/ca.pem",
}


def test_a_batch_takes_the_ids_of_its_place_in_a_pool_of_txn_id_pool_batches():
    assert pooled_id("clicks", "enriched", 3, 12) == "onceflow.clicks.enriched.pool12.3"
    assert pooled_id("clicks", "enriched", 3, 12 + TXN_ID_POOL) == pooled_id("clicks", "enriched", 3, 12)
    assert transactional_ids("clicks", "out", 3, 5) == tuple(pooled_id("clicks", "out", i, 5) for i in range(3))
    assert repair_id(pooled_id("a", "b", 0, 1)) == "onceflow.a.b.pool1.0.repair"
    # A pipeline's ids are bounded by its shape: TXN_ID_POOL per split, however many batches it runs.
    assert len({pooled_id("p", "s", i, batch) for i in range(3) for batch in range(1, 1000)}) == 3 * TXN_ID_POOL


def test_batches_nearer_than_the_pool_never_share_an_id_and_ids_of_older_plans_still_belong_to_their_split():
    for batch in range(1, 100):
        nearer = {pooled_id("p", "s", 0, other) for other in range(batch + 1, batch + TXN_ID_POOL)}
        assert pooled_id("p", "s", 0, batch) not in nearer
        assert pooled_id("p", "s", 0, batch) in own_ids("p", "s", 0, batch)
    # Plans of older versions named an id per batch (0.4), the split's id alone (offsets) or its slot's (interval).
    assert transactional_id("clicks", "enriched", 3, 12) == "onceflow.clicks.enriched.b12.3"
    assert transactional_id("clicks", "enriched", 1, slot=7) == "onceflow.clicks.enriched.slot7.1"
    for older in (transactional_id("p", "s", 1), transactional_id("p", "s", 1, slot=12), transactional_id("p", "s", 1, 4),
                  pooled_id("p", "s", 1, 4)):
        assert is_split_id(older, "p", "s", 1, 4)
        assert not is_split_id(older, "p", "s", 0, 4)
        assert not is_split_id(older, "p", "t", 1, 4)
    assert not is_split_id(transactional_id("p", "s", 1, 3), "p", "s", 1, 4)  # another batch's id
    assert not is_split_id(pooled_id("p", "s", 1, 3), "p", "s", 1, 4)  # another place in the pool
    assert not is_split_id("onceflow.p.s.slotx.1", "p", "s", 1, 4) and not is_split_id("onceflow.p.s.1.repair", "p", "s", 1, 4)
    with pytest.raises(ValueError):
        transactional_id("p", "s", 0, -1)
    with pytest.raises(ValueError):
        pooled_id("p", "s", 0, -1)


def test_two_pipelines_never_share_an_id():
    ids = {transactional_id(p, s, i) for p in ("a", "a-b", "ab") for s in ("b", "x") for i in range(3)}
    assert len(ids) == 18


@pytest.mark.parametrize("pipeline,sink,split", [("a.b", "s", 0), ("", "s", 0), ("p", "s s", 0), ("p", "s", -1), ("p", "s", True)])
def test_transactional_id_refuses_names_that_would_make_ids_ambiguous(pipeline, sink, split):
    with pytest.raises(ValueError):
        transactional_id(pipeline, sink, split)


def test_connection_settings_pass_through_unchanged_to_every_client():
    producer = producer_config(SECURE, "onceflow.p.s.0")
    consumer = consumer_config(SECURE, "g")
    for key, value in SECURE.items():
        assert producer[key] == value and consumer[key] == value
    assert kafka_python_config(SECURE) == {
        "bootstrap_servers": "b1:9093,b2:9093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "etl",
        "sasl_plain_password": "hunter2",
        "ssl_cafile": "/etc/ca.pem",
    }


def test_redact_hides_every_secret_and_keeps_the_rest():
    shown = redact({**SECURE, "ssl.key.password": "k", "sasl.oauthbearer.client.secret": "s", "sasl.jaas.config": "j"})
    assert "hunter2" not in repr(shown) and "'k'" not in repr(shown)
    assert shown["sasl.password"] == shown["ssl.key.password"] == shown["sasl.jaas.config"] == REDACTED
    assert shown["sasl.username"] == "etl" and shown["bootstrap.servers"] == SECURE["bootstrap.servers"]


@pytest.mark.parametrize(
    "setting,expected",
    [({"transactional.id": "mine"}, "transactional.id"), ({"enable.idempotence": False}, "enable.idempotence"), ({"acks": 1}, "acks")],
)
def test_settings_that_break_exactly_once_fail_fast_naming_the_setting(setting, expected):
    with pytest.raises(ConfigurationError, match=expected) as err:
        producer_config({**SECURE, **setting}, "onceflow.p.s.0")
    assert "hunter2" not in str(err.value)


def test_reader_refuses_read_uncommitted():
    with pytest.raises(ConfigurationError, match="isolation.level"):
        consumer_config({**SECURE, "isolation.level": "read_uncommitted"}, "g")


def test_consumers_accept_broker_answers_that_ignore_fetch_limits_unless_the_user_caps_them():
    # noida-db answers past fetch.max.bytes; a dropped answer would stall planning and commit.
    assert consumer_config(SECURE, "g")["receive.message.max.bytes"] == RECEIVE_MESSAGE_MAX_BYTES
    assert consumer_config({**SECURE, "receive.message.max.bytes": 50_000_000}, "g")["receive.message.max.bytes"] == 50_000_000


def test_producers_consumers_and_admin_clients_keep_their_broker_connections_unless_the_user_says_otherwise(monkeypatch):
    # Sparse connections make init_transactions, a read's first metadata and fetch, and an admin client's
    # first answer wait for a reconnect backoff.
    assert producer_config(SECURE, "onceflow.p.s.0")["enable.sparse.connections"] is False
    assert producer_config({**SECURE, "enable.sparse.connections": True}, "onceflow.p.s.0")["enable.sparse.connections"] is True
    assert consumer_config(SECURE)["enable.sparse.connections"] is False
    assert consumer_config({**SECURE, "enable.sparse.connections": True})["enable.sparse.connections"] is True
    assert client_config(SECURE) == {**SECURE, "enable.sparse.connections": False}
    assert client_config({**SECURE, "enable.sparse.connections": True})["enable.sparse.connections"] is True
    # The admin clients of the tasks' checks (the connection, each Kafka output's broker setting) are built from it.
    from onceflow.kafka import admin, connection

    built = []

    def recorded(config):  # a stand-in that records the settings and goes no further
        built.append(config)
        raise RuntimeError("recorded")

    monkeypatch.setattr(admin, "AdminClient", recorded)
    monkeypatch.setattr(connection, "AdminClient", recorded)
    for check in (lambda: admin.broker_setting(SECURE, "x"), lambda: connection.check_connection(SECURE)):
        with pytest.raises(RuntimeError):
            check()
    assert [config["enable.sparse.connections"] for config in built] == [False, False]


def test_missing_bootstrap_servers_names_the_setting():
    with pytest.raises(ConfigurationError, match="bootstrap.servers"):
        producer_config({}, "onceflow.p.s.0")


def test_every_end_txn_answer_maps_to_one_action_and_unknown_is_not_success():
    assert classify(0)[1] is Action.DONE
    for code in (14, 15, 16, 51):
        assert classify(code)[1] is Action.RETRY
    for code in (47, 48, 90, CONNECTION_CLOSED):
        assert classify(code)[1] is Action.VERIFY
    assert classify(12345)[1] is Action.FAIL
    assert [c for c, (_, a) in ACTIONS.items() if a is Action.DONE] == [0]
