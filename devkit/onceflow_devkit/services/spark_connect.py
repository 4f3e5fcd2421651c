"""A Spark Connect server on 127.0.0.1: what a ``spark_connect`` connection reaches.

PySpark ships the server (``SparkConnectServer`` in its spark-connect jar); it
runs here as one JVM with a ``local[N]`` master, started once and shared by
every batch, so a batch pays no JVM start. Its Python workers run this
interpreter with the environment given here and nothing else: the secrets the
jobs' workers need (the embedded S3's keys) are passed in, as a deployment
sets them where its server runs.

It requires an authentication token (``spark.connect.authenticate.token``, which
the server takes from its environment: never a command-line argument), made at
start; the connection carries it as its password and reaches the server as
``localhost``: the Spark Connect client speaks TLS to any other host once a token
is set, and this server has no TLS.
"""

from __future__ import annotations

import secrets
import socket
import sys
from dataclasses import dataclass, field
from typing import Mapping

from onceflow_devkit.services.process import ManagedProcess, pick_port
from onceflow.spark.local_session import LOCAL_CONF
from onceflow_devkit.services.spark_standalone import daemon_env, spark_home

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002


TOKEN_VAR = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # the server's token, from its environment


@dataclass(frozen=True)
class SparkConnectServer:
    host: str
    port: int
    token: str | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """Where it answers, to show (no token)."""
        return f"sc://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """What a client connects with, its token included: never print it."""
        return f"{self.address}/;token={self.token}" if self.token else self.address

    def connection(self) -> dict:
        """The Airflow connection that reaches it (the Spark provider's ``spark_connect`` type)."""
        return {"conn_type": "spark_connect", "host": self.host, "port": self.port,
                **({"password": self.token} if self.token else {})}


def _answers(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


def start_connect_server(
    process: ManagedProcess,
    env: Mapping[str, str] | None = None,
    master: str = "local[2]",
    die_with_parent: bool = False,
    port: int | None = None,
    token: str | None = None,
) -> SparkConnectServer:
    """Start the server; ready once its gRPC port answers (after the SparkContext is up).
    ``env``: what its Python workers need beyond the basics (secrets, test switches).
    ``port``: this one (a restart, which clients must find where they were told), else a free one.
    ``token``: the one clients must present (a restart keeps it), else a new one."""
    port = port or pick_port(DEFAULT_PORT)
    token = token or secrets.token_urlsafe(24)
    server_env = {**daemon_env(), "PYSPARK_PYTHON": sys.executable, **(env or {}), TOKEN_VAR: token}
    conf = {**LOCAL_CONF, "spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port)}
    argv = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--name", "onceflow Spark Connect",
            "--master", master]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    process.start(argv, port=port, env=server_env, ready=lambda: _answers(port), timeout=120,
                  die_with_parent=die_with_parent)
    return SparkConnectServer("localhost", port, token)


@dataclass
class RestartableConnectServer:
    """A server that can crash and come back on the same address (chaos runs): its process,
    the environment it was started with, and where it answers."""

    process: ManagedProcess
    env: Mapping[str, str] = field(default_factory=dict)
    server: SparkConnectServer | None = None

    def start(self) -> SparkConnectServer:
        self.server = start_connect_server(self.process, env=self.env, port=self.server.port if self.server else None,
                                           token=self.server.token if self.server else None)
        return self.server

    def crash_and_restart(self) -> bool:
        """SIGKILL the server and its Python workers, start it again; False when it was not running."""
        killed = self.process.kill()
        self.start()
        return killed

    def stop(self) -> None:
        self.process.stop(grace=5)
