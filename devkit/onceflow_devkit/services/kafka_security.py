"""A secured Apache Kafka of the dev kit: TLS, SCRAM users and the authorizer, made at start.

- **Certificates**: ``openssl`` makes a CA and one node certificate (``127.0.0.1``, ``localhost``)
  in the directory's ``tls/``, as PEM files: the nodes read theirs as a PEM keystore, every client
  trusts ``ca.pem`` (kafka-python reads PEM only). Nothing secret is checked in; each stack makes its own.
- **Users**: SCRAM-SHA-512 credentials, created when a node's storage is formatted
  (``kafka-storage format --add-scram``). The format command reads those arguments from a file
  (``@file``), so no password is ever on a command line. ``users.json`` keeps the passwords for the
  clients, readable by its owner only.
- **Listeners**: clients on ``SASL_SSL``; the controller listener on 127.0.0.1 speaks
  ``SASL_PLAINTEXT`` with PLAIN (KAFKA-15513: a controller cannot check SCRAM on its own listener).
- **Authorizer**: ``StandardAuthorizer``, no ACL means no access; the super users are the dev kit's
  admin and the nodes' own principal (they need ClusterAction among themselves). Every other user
  gets what ``onceflow acls`` prints and nothing more.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from onceflow.kafka.acls import PRINCIPALS
from onceflow_devkit.services.process import ServiceError, write_private

if TYPE_CHECKING:
    from onceflow.kafka.acls import Grant
    from onceflow_devkit.services.kafka_broker import KafkaBroker

MECHANISM = "SCRAM-SHA-512"
ADMIN = "onceflow-admin"
NODE = "kafka-node"  # the brokers' and controllers' own principal
# The users every secured node knows: the admin, the nodes, and the library's default principals.
USERS = (ADMIN, NODE, *(p.default_user for p in PRINCIPALS))
CERT_DAYS = 30


@dataclass(frozen=True)
class Security:
    """The credentials of a secured cluster, kept in ``directory`` (saved by path in each ``node.json``)."""

    directory: str

    @property
    def tls(self) -> Path:
        return Path(self.directory) / "tls"

    @property
    def ca_file(self) -> Path:
        return self.tls / "ca.pem"

    @property
    def node_keystore(self) -> Path:
        return self.tls / "node.pem"

    def password(self, user: str) -> str:
        users = json.loads((Path(self.directory) / "users.json").read_text())
        if user not in users:
            raise ServiceError(f"the secured Kafka in {self.directory} has no user {user!r}; its users: {', '.join(users)}")
        return users[user]

    def client_config(self, user: str = ADMIN) -> dict[str, str]:
        """librdkafka settings of ``user`` (``onceflow.kafka.config`` translates them for kafka-python)."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM, "sasl.username": user,
                "sasl.password": self.password(user), "ssl.ca.location": str(self.ca_file)}

    def listeners(self, port: int, controller_port: int) -> dict[str, str]:
        """A node's listener, TLS, SASL and authorizer settings (its server.properties holds the node's password)."""
        node = self.password(NODE)
        plain = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                 f'username="{NODE}" password="{node}" user_{NODE}="{node}";')
        scram = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{NODE}" password="{node}";'
        return {
            "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.node_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{ADMIN};User:{NODE}",
        }

    @property
    def admin_properties(self) -> Path:
        return Path(self.directory) / "admin.properties"

    def write_admin_properties(self) -> Path:
        """The admin's settings for Kafka's own tools (``kafka-acls.sh --command-config``), readable by its owner only."""
        jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN}" '
                f'password="{self.password(ADMIN)}";')
        write_private(self.admin_properties, f"security.protocol=SASL_SSL\nsasl.mechanism={MECHANISM}\n"
                      f"sasl.jaas.config={jaas}\nssl.truststore.type=PEM\nssl.truststore.location={self.ca_file}\n")
        return self.admin_properties

    def scram_arguments(self) -> str:
        """The ``--add-scram`` arguments of ``kafka-storage format``, one a line, for its ``@file``."""
        users = json.loads((Path(self.directory) / "users.json").read_text())
        return "".join(f"--add-scram\n{MECHANISM}=[name={user},password={password}]\n" for user, password in users.items())


def secure(directory: Path, users: Iterable[str] = USERS) -> Security:
    """The credentials in ``directory``, made there on first use: a password per user, the CA and
    the node certificate. A restart finds them again (the formatted storage knows those users)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    users_file = directory / "users.json"
    if not users_file.exists():
        write_private(users_file, json.dumps({user: secrets.token_urlsafe(24) for user in dict.fromkeys(users)}))
    security = Security(str(directory))
    if not security.node_keystore.exists():
        make_certificates(security.tls)
    return security


def make_certificates(tls: Path) -> None:
    """A CA (``ca.pem``; its key stays in ``ca.key``) and the nodes' key and certificate chain (``node.pem``)."""
    if shutil.which("openssl") is None:
        raise ServiceError("the secured Kafka makes its certificates with `openssl`: install it "
                           "(Debian/Ubuntu: apt-get install openssl)")
    tls.mkdir(parents=True, exist_ok=True)
    tls.chmod(0o700)
    key = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    _openssl(tls, "genpkey", *key, "-out", "ca.key")
    _openssl(tls, "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=onceflow dev kit CA", "-days", str(CERT_DAYS),
             "-out", "ca.pem")
    _openssl(tls, "genpkey", *key, "-out", "node.key")
    _openssl(tls, "req", "-x509", "-new", "-key", "node.key", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
             "-addext", "basicConstraints=CA:FALSE", "-days", str(CERT_DAYS), "-out", "node.crt")
    write_private(tls / "node.pem", (tls / "node.key").read_text() + (tls / "node.crt").read_text())


def _openssl(cwd: Path, *args: str) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise ServiceError(f"openssl {args[0]} failed making the secured Kafka's certificates:\n{done.stderr[-2000:]}")


@dataclass(frozen=True)
class SecuredKafka:
    """A running secured cluster: ``broker`` connects as the dev kit admin, ``as_user`` as any of its users."""

    broker: "KafkaBroker"
    security: Security

    def as_user(self, user: str, **overrides: str) -> "KafkaBroker":
        from dataclasses import replace

        return replace(self.broker, client_config={**self.security.client_config(user), **overrides})


def _bindings(grants: Iterable["Grant"], kind) -> list:
    """``grants`` as the Admin API's ``kind`` (AclBinding to create, AclBindingFilter to delete)."""
    from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    types = {"TOPIC": ResourceType.TOPIC, "GROUP": ResourceType.GROUP, "TRANSACTIONAL_ID": ResourceType.TRANSACTIONAL_ID,
             "CLUSTER": ResourceType.BROKER}
    return [kind(types[g.resource.name], g.name, ResourcePatternType[g.pattern.upper()], g.principal, "*",
                 AclOperation[g.operation], AclPermissionType.ALLOW) for g in grants]


def apply_grants(admin_config: Mapping[str, Any], grants: Iterable["Grant"], revoke: bool = False,
                 timeout_s: float = 30.0) -> None:
    """Create (or, ``revoke``, delete) the ACLs of ``grants`` through the Admin API, as ``kafka-acls.sh``
    does, and return once the broker's authorizer shows them so (it learns them from the metadata log)."""
    from confluent_kafka.admin import AclBinding, AclBindingFilter, AclOperation, AdminClient, AclPermissionType, \
        ResourcePatternType, ResourceType

    grants = list(grants)
    if not grants:
        return
    admin = AdminClient(dict(admin_config))
    calls = (admin.delete_acls(_bindings(grants, AclBindingFilter), request_timeout=timeout_s) if revoke
             else admin.create_acls(_bindings(grants, AclBinding), request_timeout=timeout_s))
    for future in calls.values():
        future.result(timeout_s)
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    wanted = _bindings(grants, AclBinding)
    deadline = time.monotonic() + timeout_s
    while True:
        shown = set(admin.describe_acls(every, request_timeout=timeout_s).result(timeout_s))
        if all((binding in shown) != revoke for binding in wanted):
            return
        if time.monotonic() > deadline:
            raise ServiceError(f"the broker's authorizer did not show {'the removal of ' if revoke else ''}"
                               f"{len(wanted)} ACL(s) within {timeout_s:.0f} s")
        time.sleep(0.05)
