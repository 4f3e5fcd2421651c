"""The least a pipeline's processes need on a secured Kafka: one table, printed for operators.

Two principals (a deployment names its own users; these are the default names, which the dev kit's
secured broker creates):

- ``spark``: whatever writes: the Spark driver and executors of spark-submit, or a Spark Connect
  server's Python workers. It reads the planned ranges and produces each split in a transaction.
- ``airflow``: whatever decides: the plan, commit and rollback tasks, the triggerer, the onceflow
  page and the ``onceflow`` CLI. It plans, ends transactions, reads outputs back, repairs, fences
  and mirrors offsets.

Each row of ``ACLS`` grants one principal one operation on one of a pipeline's resources
(``Of``). What Apache Kafka checks (``KafkaApis``): Fetch, READ on the topic; Produce and
AddPartitionsToTxn, WRITE on the topic and the transactional id; InitProducerId and EndTxn, WRITE on
the transactional id; DescribeTransactions, DESCRIBE on it (WRITE implies it); DescribeProducers,
READ on the topic; OffsetCommit, READ on the group and the topic; WriteTxnMarkers, ALTER or
CLUSTER_ACTION on the cluster. Prefixed ACLs end at a separator
(``onceflow.config.names.transactional_id_prefix``): pipeline ``orders`` never grants ``orders2``'s ids.

Rows that are not ``required`` buy one thing, and their absence costs only that (the row says what).
``onceflow acls --pipeline NAME`` prints the grants as ``kafka-acls.sh`` commands (docs/security.md).
"""

from __future__ import annotations

import enum
import re
import shlex
from dataclasses import dataclass
from typing import Mapping, Sequence

from onceflow.config.names import transactional_id_prefix
from onceflow.kafka.config import ASSIGN_ONLY_GROUP


class Resource(enum.Enum):
    """Kafka's resource types, as ``kafka-acls.sh`` names them (its option, and the name in messages)."""

    TOPIC = ("Topic", "--topic")
    GROUP = ("Group", "--group")
    TRANSACTIONAL_ID = ("TransactionalId", "--transactional-id")
    CLUSTER = ("Cluster", "--cluster")

    def __init__(self, label: str, option: str) -> None:
        self.label = label
        self.option = option


class Of(enum.Enum):
    """Which of a pipeline's resources a row is about."""

    INPUT_TOPICS = "input topics"
    OUTPUT_TOPICS = "Kafka sinks' topics"
    OFFSETS_GROUP = "offsets group"
    READERS_GROUP = "readers' group"
    TRANSACTIONAL_IDS = "transactional ids"
    CLUSTER = "cluster"


@dataclass(frozen=True)
class Principal:
    role: str
    default_user: str
    runs: str


SPARK = Principal("spark", "onceflow-spark", "the Spark driver and executors (spark-submit), or a Spark Connect "
                  "server's Python workers")
AIRFLOW = Principal("airflow", "onceflow-airflow", "Airflow's plan, commit and rollback tasks, the triggerer, the "
                    "onceflow page (api-server) and the onceflow CLI")
PRINCIPALS = (SPARK, AIRFLOW)


@dataclass(frozen=True)
class Acl:
    """One grant of the table: ``principal`` may ``operation`` the pipeline's ``of``."""

    principal: Principal
    operation: str  # as kafka-acls.sh spells it: Read, Write, Describe, Alter, DescribeConfigs...
    of: Of
    why: str
    required: bool = True

    @property
    def key(self) -> str:
        """A name for the row (tests are parametrized by it)."""
        return f"{self.principal.role}-{self.operation.lower()}-{self.of.name.lower().replace('_', '-')}"


READERS_GROUP_WHY = ("the group id librdkafka's consumers need: they look up its coordinator (FindCoordinator) even "
                     "though onceflow's readers only assign() and never commit to it")
ACLS: tuple[Acl, ...] = (
    Acl(SPARK, "Read", Of.INPUT_TOPICS, "read the batch's planned ranges (Fetch)"),
    Acl(SPARK, "Describe", Of.READERS_GROUP, READERS_GROUP_WHY),
    Acl(SPARK, "Write", Of.OUTPUT_TOPICS, "produce each split's records in its transaction"),
    Acl(SPARK, "Write", Of.TRANSACTIONAL_IDS, "InitProducerId and AddPartitionsToTxn for each split; a retried "
        "attempt fences the earlier attempt's ids"),
    Acl(AIRFLOW, "Read", Of.INPUT_TOPICS, "plan: the input's partitions and last stable offsets; the offsets mirror "
        "(OffsetCommit) and the lag on the page and in the triggerer"),
    Acl(AIRFLOW, "Describe", Of.READERS_GROUP, READERS_GROUP_WHY),
    Acl(AIRFLOW, "Read", Of.OFFSETS_GROUP, "commit: mirror the batch's input offsets to the consumer group, so lag "
        "tools show the truth; the page reads them back"),
    Acl(AIRFLOW, "Read", Of.OUTPUT_TOPICS, "commit: read each split back until it is visible; rollback: see it aborted"),
    Acl(AIRFLOW, "Write", Of.OUTPUT_TOPICS, "commit: re-publish a split the broker aborted, from its staged copy"),
    Acl(AIRFLOW, "Write", Of.TRANSACTIONAL_IDS, "commit: DescribeTransactions and EndTxn(commit) of each split; "
        "rollback: EndTxn(abort) and fencing every id the plan allows; the repair ids"),
    Acl(AIRFLOW, "Alter", Of.CLUSTER, "commit: write the commit marker a transaction coordinator dropped "
        "(WriteTxnMarkers, ALTER or CLUSTER_ACTION on the cluster). Without it such a hanging split's commit answers "
        "retry-later, naming the split, the permission and the remedy", required=False),
    Acl(AIRFLOW, "DescribeConfigs", Of.CLUSTER, "plan: check each Kafka sink's transaction_timeout_ms against the "
        "brokers' transaction.max.timeout.ms. Without it the plan logs a warning, and a timeout over the limit is "
        "refused by init_transactions in the Spark job instead", required=False),
    Acl(SPARK, "DescribeConfigs", Of.OUTPUT_TOPICS, "the Spark driver: read each sink topic's max.message.bytes, to "
        "withhold the records over it. Without it the producer's own limit is used (a warning says so), and a topic "
        "set lower fails the batch", required=False),
)


@dataclass(frozen=True)
class PipelineResources:
    """The Kafka resources of one pipeline: what the table's rows are granted on."""

    pipeline: str
    input_topics: tuple[str, ...]
    output_topics: tuple[str, ...]
    offsets_group: str

    def named(self, of: Of) -> list[tuple[Resource, str, str]]:
        """(resource type, name, pattern type) of each resource ``of`` stands for in this pipeline."""
        if of is Of.INPUT_TOPICS:
            return [(Resource.TOPIC, t, "literal") for t in self.input_topics]
        if of is Of.OUTPUT_TOPICS:
            return [(Resource.TOPIC, t, "literal") for t in self.output_topics]
        if of is Of.OFFSETS_GROUP:
            return [(Resource.GROUP, self.offsets_group, "literal")]
        if of is Of.READERS_GROUP:
            return [(Resource.GROUP, ASSIGN_ONLY_GROUP, "literal")]
        if of is Of.TRANSACTIONAL_IDS:
            return [(Resource.TRANSACTIONAL_ID, transactional_id_prefix(self.pipeline), "prefixed")]
        return [(Resource.CLUSTER, "kafka-cluster", "literal")]


@dataclass(frozen=True)
class Grant:
    """One ACL binding of a pipeline: a row of ``ACLS`` on one named resource, for one user."""

    acl: Acl
    user: str
    resource: Resource
    name: str
    pattern: str  # literal | prefixed

    @property
    def principal(self) -> str:
        return f"User:{self.user}"

    @property
    def operation(self) -> str:
        """The operation as Kafka's ACL API and the refusals name it: DescribeConfigs -> DESCRIBE_CONFIGS."""
        return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", self.acl.operation).upper()

    def command(self, bootstrap: str = "BROKER:9093", command_config: str = "admin.properties") -> str:
        """This grant as a ``kafka-acls.sh`` command; ``command_config`` holds the admin's own settings
        (a file: no password on the command line)."""
        resource = [self.resource.option] if self.resource is Resource.CLUSTER else [self.resource.option, self.name]
        pattern = ["--resource-pattern-type", "prefixed"] if self.pattern == "prefixed" else []
        words = ["kafka-acls.sh", "--bootstrap-server", bootstrap, "--command-config", command_config, "--add",
                 "--allow-principal", self.principal, "--operation", self.acl.operation, *resource, *pattern]
        return " ".join(shlex.quote(w) for w in words)


def default_users() -> dict[str, str]:
    return {p.role: p.default_user for p in PRINCIPALS}


def grants(resources: PipelineResources, users: Mapping[str, str] | None = None,
           acls: Sequence[Acl] = ACLS, required_only: bool = False) -> list[Grant]:
    """The pipeline's grants: each row of ``acls`` on each resource it names, for the user of its
    principal's role (``users``: role -> user name; the defaults otherwise)."""
    users = {**default_users(), **(users or {})}
    return [Grant(acl, users[acl.principal.role], resource, name, pattern)
            for acl in acls if acl.required or not required_only
            for resource, name, pattern in resources.named(acl.of)]


def script(resources: PipelineResources, users: Mapping[str, str] | None = None, bootstrap: str = "BROKER:9093",
           command_config: str = "admin.properties") -> str:
    """The pipeline's grants as a shell script of ``kafka-acls.sh`` commands, each under the row's why;
    rows that are not required are printed commented out, with what they buy."""
    users = {**default_users(), **(users or {})}
    lines = [f"# The ACLs of pipeline {resources.pipeline}: what onceflow's two principals need, and nothing more.",
             f"# {command_config}: the settings of a principal allowed to create ACLs (no password on a command line)."]
    for principal in PRINCIPALS:
        lines += ["", f"# User:{users[principal.role]} ({principal.role}): {principal.runs}."]
        for acl in (a for a in ACLS if a.principal == principal):
            lines.append(f"# {'' if acl.required else 'optional, '}{acl.operation} on the {acl.of.value}: {acl.why}.")
            lines += [("" if acl.required else "# ") + g.command(bootstrap, command_config)
                      for g in grants(resources, users, [acl])]
    return "\n".join(lines)
