"""The embedded S3 endpoint: moto_server on 127.0.0.1."""

from __future__ import annotations

import shutil
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .process import ManagedProcess, pick_port

DEFAULT_PORT = 9000
# moto accepts any credentials; these are what the embedded stack hands out.
ACCESS_KEY = "onceflow"
SECRET_KEY = "onceflow-secret"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Endpoint:
    endpoint_url: str
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION

    def client(self, config=None):
        """A boto3 S3 client for this endpoint (``config``: a botocore Config)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=config,
        )

    def env(self) -> dict[str, str]:
        """Variables for tools that read AWS settings from the environment."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint_url,
        }


def _moto_server() -> str:
    here = Path(sys.executable).parent / "moto_server"
    return str(here) if here.exists() else (shutil.which("moto_server") or "moto_server")


def _answers_http(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1) as resp:
        return resp.status == 200


def start_moto(proc: ManagedProcess, die_with_parent: bool = False) -> S3Endpoint:
    port = pick_port(DEFAULT_PORT)
    url = f"http://127.0.0.1:{port}"
    proc.start(
        [_moto_server(), "-H", "127.0.0.1", "-p", str(port)],
        port=port,
        ready=lambda: _answers_http(url + "/"),
        timeout=30,
        die_with_parent=die_with_parent,
    )
    return S3Endpoint(url)
