"""The least-privilege table (onceflow.kafka.acls) as a security team reads it: who may do what to which
of a pipeline's resources, printed as the kafka-acls.sh commands an operator runs."""

from __future__ import annotations

import json

import pytest

from onceflow.kafka.acls import ACLS, AIRFLOW, PRINCIPALS, SPARK, Of, PipelineResources, Resource, grants, script
from onceflow.ops.cli import main
from onceflow_examples.clickstream import CLICKSTREAM

ORDERS = PipelineResources("orders", ("orders-in",), ("orders-out", "orders-dlq"), "onceflow-orders")


def granted(resources: PipelineResources, **kwargs) -> set[tuple[str, str, str, str, str]]:
    return {(g.principal, g.acl.operation, g.resource.label, g.name, g.pattern) for g in grants(resources, **kwargs)}


def test_each_principal_gets_exactly_these_grants_on_a_pipeline():
    spark, airflow = "User:onceflow-spark", "User:onceflow-airflow"
    assert granted(ORDERS, required_only=True) == {
        (spark, "Read", "Topic", "orders-in", "literal"),
        (spark, "Describe", "Group", "onceflow.readers", "literal"),
        (spark, "Write", "Topic", "orders-out", "literal"),
        (spark, "Write", "Topic", "orders-dlq", "literal"),
        (spark, "Write", "TransactionalId", "onceflow.orders.", "prefixed"),
        (airflow, "Read", "Topic", "orders-in", "literal"),
        (airflow, "Describe", "Group", "onceflow.readers", "literal"),
        (airflow, "Read", "Group", "onceflow-orders", "literal"),
        (airflow, "Read", "Topic", "orders-out", "literal"),
        (airflow, "Read", "Topic", "orders-dlq", "literal"),
        (airflow, "Write", "Topic", "orders-out", "literal"),
        (airflow, "Write", "Topic", "orders-dlq", "literal"),
        (airflow, "Write", "TransactionalId", "onceflow.orders.", "prefixed"),
    }
    assert granted(ORDERS) - granted(ORDERS, required_only=True) == {
        (airflow, "Alter", "Cluster", "kafka-cluster", "literal"),
        (airflow, "DescribeConfigs", "Cluster", "kafka-cluster", "literal"),
        (spark, "DescribeConfigs", "Topic", "orders-out", "literal"),
        (spark, "DescribeConfigs", "Topic", "orders-dlq", "literal"),
    }


def test_normal_work_needs_no_cluster_permission_and_the_spark_side_never_commits_offsets():
    assert not [a for a in ACLS if a.required and a.of is Of.CLUSTER]
    assert not [a for a in ACLS if a.principal is SPARK and a.of in (Of.OFFSETS_GROUP, Of.CLUSTER)]
    assert not [a for a in ACLS if a.principal is SPARK and a.operation != "Read" and a.of is Of.INPUT_TOPICS]


def test_every_row_belongs_to_a_principal_and_says_why_and_rows_are_told_apart_by_key():
    assert {a.principal for a in ACLS} == set(PRINCIPALS)
    assert all(a.why and a.operation in ("Read", "Write", "Describe", "Alter", "DescribeConfigs") for a in ACLS)
    assert {g.operation for g in grants(ORDERS)} == {"READ", "WRITE", "DESCRIBE", "ALTER", "DESCRIBE_CONFIGS"}
    assert len({a.key for a in ACLS}) == len(ACLS)


def test_a_pipeline_s_id_prefix_never_covers_another_pipeline_whose_name_begins_alike():
    (prefix,) = {g.name for g in grants(ORDERS) if g.resource is Resource.TRANSACTIONAL_ID}
    from onceflow.sinks.kafka.ids import transactional_id

    assert transactional_id("orders", "out", 0, 1).startswith(prefix)
    assert not transactional_id("orders2", "out", 0, 1).startswith(prefix)


def test_the_commands_are_kafka_acls_commands_with_no_secret_and_optional_rows_commented_out():
    text = script(ORDERS, {"spark": "etl-writer"}, bootstrap="b1:9093", command_config="/etc/kafka/admin.properties")
    commands = [line for line in text.splitlines() if line.startswith("kafka-acls.sh")]
    assert len(commands) == len(grants(ORDERS, required_only=True))
    assert ("kafka-acls.sh --bootstrap-server b1:9093 --command-config /etc/kafka/admin.properties --add "
            "--allow-principal User:etl-writer --operation Write --transactional-id onceflow.orders. "
            "--resource-pattern-type prefixed") in commands
    assert "# kafka-acls.sh --bootstrap-server b1:9093 --command-config /etc/kafka/admin.properties --add " \
           "--allow-principal User:onceflow-airflow --operation Alter --cluster" in text.splitlines()
    assert not [c for c in commands if "password" in c.lower() or "jaas" in c.lower()]


def test_onceflow_acls_prints_the_pipeline_s_grants_from_its_spec(capsys):
    assert main(["acls", "--pipeline", "clickstream", "--spec", "onceflow_examples.clickstream:CLICKSTREAM",
                 "--airflow-user", "scheduler", "--bootstrap-server", "kafka:9093"]) == 0
    assert capsys.readouterr().out.strip() == script(CLICKSTREAM.kafka_resources(), {"airflow": "scheduler"}, "kafka:9093")
    assert main(["acls", "--pipeline", "clickstream", "--spec", "onceflow_examples.clickstream:CLICKSTREAM", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["principal"], r["operation"], r["name"]) for r in rows} >= {
        (f"User:{SPARK.default_user}", "Write", "clicks_enriched"), (f"User:{AIRFLOW.default_user}", "Read", "onceflow-clickstream")}


@pytest.mark.parametrize("name", ["acl-table", "acls-clickstream"])
def test_docs_security_md_shows_the_table_as_the_code_has_it(name):
    from onceflow_devkit import doc_blocks, security_doc

    assert doc_blocks.read(security_doc.PAGE, name) == security_doc.BLOCKS[name](), (
        "docs/security.md is behind onceflow.kafka.acls: python -m onceflow_devkit.security_doc writes it again")
