"""A refused request, said as who may not do what to which resource (onceflow.kafka.refusals)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from kafka.errors import TopicAuthorizationFailedError

from onceflow.kafka.acls import Resource
from onceflow.kafka.refusals import AUTHORIZATION_FAILED, NotAuthorized, check, check_exception, refusal

SPARK = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "etl-writer"}
NEEDS = {Resource.TOPIC: ("WRITE", "orders-out"), Resource.TRANSACTIONAL_ID: ("WRITE", "onceflow.orders.daily.b7.0")}


def test_each_authorization_code_of_both_libraries_is_the_refusal_of_its_resource_type():
    assert {KafkaError.TOPIC_AUTHORIZATION_FAILED: Resource.TOPIC, KafkaError.GROUP_AUTHORIZATION_FAILED: Resource.GROUP,
            KafkaError.CLUSTER_AUTHORIZATION_FAILED: Resource.CLUSTER,
            KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Resource.TRANSACTIONAL_ID} == AUTHORIZATION_FAILED


def test_a_refusal_names_the_principal_the_operation_and_the_resource_and_the_fix():
    said = str(refusal(SPARK, 53, "opening split 0's transaction", NEEDS))
    assert said.startswith("User:etl-writer may not WRITE TransactionalId onceflow.orders.daily.b7.0 (opening split 0's "
                           "transaction): grant it")
    assert "onceflow acls --pipeline" in said
    cluster = refusal(SPARK, 31, "WriteTxnMarkers", {Resource.CLUSTER: ("ALTER or CLUSTER_ACTION", "")})
    assert str(cluster).startswith("User:etl-writer may not ALTER or CLUSTER_ACTION Cluster (WriteTxnMarkers)")


def test_other_errors_are_no_refusal_and_are_left_to_the_caller():
    assert refusal(SPARK, KafkaError._TIMED_OUT, "x", NEEDS) is None
    check(SPARK, KafkaError.NOT_COORDINATOR, "x", NEEDS)  # returns


def test_refusals_of_either_client_library_raise_not_authorized():
    with pytest.raises(NotAuthorized, match="may not WRITE Topic orders-out"):
        check_exception(SPARK, KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), "producing", NEEDS)
    with pytest.raises(NotAuthorized, match="may not WRITE Topic orders-out"):
        check_exception(SPARK, TopicAuthorizationFailedError(), "producing", NEEDS)
