"""The embedded S3 endpoint: moto_server on 127.0.0.1."""

from __future__ import annotations

import shutil
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from onceflow.config.s3_connection import S3Connection
from onceflow_devkit.services.process import ManagedProcess, pick_port

DEFAULT_PORT = 9000
# moto accepts any credentials; these are what the embedded stack hands out.
ACCESS_KEY = "onceflow"
SECRET_KEY = "onceflow-secret"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Endpoint(S3Connection):
    """The embedded endpoint, with the keys the dev kit hands out."""

    endpoint_url: str | None = None
    access_key: str | None = field(default=ACCESS_KEY, repr=False)
    secret_key: str | None = field(default=SECRET_KEY, repr=False)
    region: str | None = REGION

    def credentials_env(self) -> dict[str, str]:
        """Keys and region, no endpoint: for processes told the endpoint otherwise (a Spark job's options)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
        }

    def env(self) -> dict[str, str]:
        """Variables for tools that read AWS settings from the environment."""
        return {**self.credentials_env(), "AWS_ENDPOINT_URL": self.endpoint_url}


def _moto_server() -> str:
    here = Path(sys.executable).parent / "moto_server"
    return str(here) if here.exists() else (shutil.which("moto_server") or "moto_server")


def _answers_http(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1) as resp:
        return resp.status == 200


def start_moto(proc: ManagedProcess, die_with_parent: bool = False, port: int | None = None) -> S3Endpoint:
    """``port`` pins the port; by default the usual one is used when free."""
    port = port or pick_port(DEFAULT_PORT)
    url = f"http://127.0.0.1:{port}"
    proc.start(
        [_moto_server(), "-H", "127.0.0.1", "-p", str(port)],
        port=port,
        ready=lambda: _answers_http(url + "/"),
        timeout=30,
        die_with_parent=die_with_parent,
    )
    return S3Endpoint(url)
