"""Ledger storage on S3 (or any S3 endpoint that honours conditional writes).

Runs wherever the ledger is read or written: Airflow worker, Spark driver.
create-if-absent = ``PutObject`` with ``If-None-Match: *``: S3 answers 412
PreconditionFailed when the key exists. A concurrent conditional write may
get 409 ConditionalRequestConflict; it is retried and then sees 412 or wins.
A PUT whose response was lost and is retried by botocore also comes back 412:
the caller cannot tell it from a competitor, which is why the ledger reads
back the winner and compares (the same bytes mean "ours").
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from ..s3_connection import ConditionalWriteConflict, S3Connection, create_if_absent
from .errors import LedgerUnavailable
from .storage import check_key



def _client_from(s3: Any):
    """A boto3 S3 client from an ``S3Connection``, or ``s3`` itself when it is a client."""
    from botocore.config import Config

    if s3 is None:
        from ..settings import ConfigurationError

        raise ConfigurationError("an S3 ledger needs an S3 connection (S3Connection) or a boto3 client: none was given")
    if isinstance(s3, S3Connection):
        config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30)
        return s3.client(config=config)
    return s3


class S3LedgerStorage:
    def __init__(self, bucket: str, prefix: str = "", client: Any = None):
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = _client_from(client)

    @classmethod
    def from_uri(cls, root_uri: str, s3: Any = None) -> "S3LedgerStorage":
        parsed = urlparse(root_uri)
        if not parsed.netloc:
            from ..settings import ConfigurationError

            raise ConfigurationError(f"ledger root {root_uri!r} names no bucket: use s3://<bucket>/<prefix>")
        return cls(parsed.netloc, parsed.path, s3)

    def __repr__(self) -> str:
        return f"S3LedgerStorage(s3://{self.bucket}/{self.prefix})"

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def describe(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    def _unavailable(self, key: str, exc: Exception) -> LedgerUnavailable:
        endpoint = self.client.meta.endpoint_url
        return LedgerUnavailable(
            f"ledger storage unusable at {self.describe(key)} (endpoint {endpoint}): {exc}. "
            f"Check that the endpoint is reachable, that bucket {self.bucket!r} exists and that the credentials "
            "may read and write it, then retry the task."
        )

    def create(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return create_if_absent(self.client, self.bucket, self._key(key), data)
        except ConditionalWriteConflict as exc:
            raise LedgerUnavailable(str(exc)) from exc
        except (BotoCoreError, ClientError) as exc:
            raise self._unavailable(key, exc) from exc

    def read(self, key: str) -> bytes | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise self._unavailable(key, exc) from exc
        except BotoCoreError as exc:
            raise self._unavailable(key, exc) from exc

    def overwrite(self, key: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except (BotoCoreError, ClientError) as exc:
            raise self._unavailable(key, exc) from exc

    def list(self, prefix: str) -> list[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._key(prefix.rstrip("/")) + "/" if prefix else (f"{self.prefix}/" if self.prefix else "")
        strip = len(f"{self.prefix}/") if self.prefix else 0
        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full):
                keys.extend(obj["Key"][strip:] for obj in page.get("Contents", ()))
        except (BotoCoreError, ClientError) as exc:
            raise self._unavailable(prefix, exc) from exc
        return sorted(keys)
