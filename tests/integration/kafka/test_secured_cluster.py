"""The secured Apache Kafka of the dev kit (SASL_SSL, SCRAM-SHA-512, ACL authorizer) as every onceflow
client meets it: one set of librdkafka settings reaches confluent-kafka and kafka-python alike, and a
client the cluster refuses is told at once what to fix, never left waiting out a timeout."""

from __future__ import annotations

import time

import pytest

from onceflow.config.kafka_cluster import KafkaCluster
from onceflow.config.settings import ConfigurationError
from onceflow.kafka.acls import AIRFLOW
from onceflow.kafka.connection import ConnectionRefused, check_connection
from onceflow.kafka.offsets import KafkaOffsetSource
from onceflow.kafka.refusals import NotAuthorized
from onceflow.sinks.kafka.coordinators import describe_transactions
from onceflow_devkit.services.kafka_security import make_certificates
from tests.integration.kafka.helpers import create_topic, produce_txn, read_committed

# A refusal is known after one handshake and the broker's delay for a failed login (100 ms by default).
AT_ONCE_S = 3.0


def test_both_client_libraries_connect_with_the_same_settings(secured_kafka):
    config = secured_kafka.broker.config()
    assert config["security.protocol"] == "SASL_SSL" and config["sasl.mechanism"] == "SCRAM-SHA-512"
    topic = create_topic(config, partitions=1, prefix="secured")
    produce_txn(config, topic, [b"a", b"b"], partition=0, commit=True, txn_id=f"secured-{topic}")
    assert [v for _, v, _ in read_committed(config, topic, 1)] == [b"a", b"b"]  # librdkafka
    with KafkaOffsetSource(config) as source:
        assert [r.end for r in source.topic_ranges(topic)] == [3]  # two records and the commit marker
    described = describe_transactions(config, [f"secured-{topic}"])  # kafka-python, from the same settings
    assert described[f"secured-{topic}"].state.value == "CompleteCommit"


def test_a_wrong_password_is_refused_at_once_naming_the_user_and_the_setting(secured_kafka):
    wrong = secured_kafka.as_user(AIRFLOW.default_user, **{"sasl.password": "not-the-password"})
    started = time.monotonic()
    with pytest.raises(ConnectionRefused) as refused:
        check_connection(wrong.config())
    assert time.monotonic() - started < AT_ONCE_S
    message = str(refused.value)
    assert f"refused to authenticate User:{AIRFLOW.default_user} (SCRAM-SHA-512 over SASL_SSL)" in message
    assert "sasl.username / sasl.password" in message and "not-the-password" not in message


def test_an_untrusted_certificate_is_refused_at_once_naming_ssl_ca_location(secured_kafka, tmp_path):
    make_certificates(tmp_path)  # another CA, which never signed the brokers' certificate
    untrusted = secured_kafka.as_user(AIRFLOW.default_user, **{"ssl.ca.location": str(tmp_path / "ca.pem")})
    started = time.monotonic()
    with pytest.raises(ConnectionRefused, match="the brokers' TLS certificate is not trusted") as refused:
        check_connection(untrusted.config())
    assert time.monotonic() - started < AT_ONCE_S
    assert f"This client trusts {tmp_path / 'ca.pem'}: set ssl.ca.location" in str(refused.value)


def test_a_mechanism_the_brokers_do_not_offer_is_refused_at_once(secured_kafka):
    other = secured_kafka.as_user(AIRFLOW.default_user, **{"sasl.mechanism": "SCRAM-SHA-256"})
    with pytest.raises(ConnectionRefused, match="Unsupported SASL mechanism"):
        check_connection(other.config())


def test_oauthbearer_is_refused_when_the_connection_is_read_naming_the_client_that_cannot():
    with pytest.raises(ConfigurationError, match="sasl.mechanism='OAUTHBEARER' is not supported: onceflow's EndTxn "
                       "client \\(kafka-python\\)"):
        KafkaCluster("broker:9093", {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"})


def test_the_application_users_can_do_nothing_without_acls(secured_kafka):
    topic = create_topic(secured_kafka.broker.config(), partitions=1, prefix="no-acl")
    user = secured_kafka.as_user(AIRFLOW.default_user)
    check_connection(user.config())  # authenticated: the refusal is the authorizer's
    with KafkaOffsetSource(user.config(), timeout_s=5) as source, pytest.raises(NotAuthorized) as refused:
        source.partitions([topic])
    assert str(refused.value).startswith(f"User:{AIRFLOW.default_user} may not READ Topic {topic} (")


@pytest.mark.slow  # a 3-node cluster of its own: about 20 s to start, then two runs
def test_a_three_node_secured_cluster_replicates_over_sasl_ssl_and_a_pipeline_commits_with_the_printed_acls(tmp_path):
    from confluent_kafka.admin import AdminClient

    from onceflow_devkit.services.apache_kafka import start_apache_cluster
    from onceflow_devkit.services.kafka_broker import CLUSTER, KafkaBroker
    from onceflow_devkit.services.kafka_security import SecuredKafka, Security
    from tests.conftest import TEST_HOME
    from tests.integration.kafka.test_missing_acls import RECORDS, granted_pipeline

    home = TEST_HOME / f"secured-cluster-{tmp_path.name}"
    cluster = start_apache_cluster(home, secure=True, die_with_parent=True)
    try:
        secured = SecuredKafka(KafkaBroker(cluster.bootstrap, cluster.client_config(), name=CLUSTER),
                               Security(str(home / "security")))
        pipeline = granted_pipeline(secured, tmp_path, replication=3)
        produced = pipeline.produce(RECORDS, 0)
        pipeline.run("run-1")
        produced += pipeline.produce(RECORDS, RECORDS)
        pipeline.run("run-2")
        admin = secured.broker.config()
        assert sorted(v for _, v, _ in read_committed(admin, pipeline.output, 2)) == sorted(produced)
        partitions = AdminClient(admin).list_topics(pipeline.output, timeout=10).topics[pipeline.output].partitions
        assert all(len(p.isrs) == 3 for p in partitions.values()), "every replica in sync: the nodes replicate as kafka-node"
    finally:
        cluster.stop(kill=True)
