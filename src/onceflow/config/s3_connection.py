"""Where S3 is and how onceflow signs in there: one object for every S3 client.

The ledger, the file sink and the Kafka sinks' staged copies all reach S3
through an ``S3Connection``. It has no default endpoint and no default
credential:

- ``endpoint_url`` None means AWS itself (boto3 and pyarrow pick the
  regional endpoint); any S3-compatible store names its URL.
- ``access_key``/``secret_key`` (and ``session_token``) are used when given;
  otherwise boto3's default chain answers: environment variables, a profile,
  web identity, a container or instance role. What the chain finds is passed
  to pyarrow explicitly, so both clients sign in as the same principal.
- nothing found is a ``ConfigurationError`` naming the settings to set.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlparse

from onceflow.config.settings import ConfigurationError

ENDPOINT_VAR = "ONCEFLOW_S3_ENDPOINT"
CREDENTIALS_FIX = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (plus AWS_SESSION_TOKEN for temporary keys), or "
    "AWS_PROFILE, or run it with an instance, container or web-identity role"
)
REGION_FIX = "set AWS_DEFAULT_REGION (Airflow: region_name in the aws connection's extra)"
CONFLICT_RETRIES = 5


class ConditionalWriteConflict(RuntimeError):
    """S3 kept answering 409 ConditionalRequestConflict: another writer races on the key."""


def create_if_absent(client, bucket: str, key: str, data: bytes) -> bool:
    """The one atomic create-if-absent on S3, for the ledger and the file sink alike:
    ``PutObject`` with ``If-None-Match: *``. True if written; False if the key
    exists (412). A concurrent conditional write may get 409
    ConditionalRequestConflict: retried with backoff, then it sees 412 or wins.
    Any other error propagates."""
    from botocore.exceptions import ClientError

    for retry in range(CONFLICT_RETRIES):
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "PreconditionFailed" or status == 412:
                return False
            if code == "ConditionalRequestConflict" or status == 409:
                time.sleep(0.05 * 2**retry)
                continue
            raise
    raise ConditionalWriteConflict(
        f"conditional write of s3://{bucket}/{key} kept conflicting ({CONFLICT_RETRIES} tries): another process "
        "is writing the same object. Retry the task."
    )


@dataclass(frozen=True)
class S3Connection:
    endpoint_url: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    region: str | None = None
    session_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigurationError(
                "S3 credentials are half given (an access key without its secret, or the reverse): "
                "give both, or neither to use the default AWS credential chain"
            )

    @classmethod
    def from_environment(cls) -> "S3Connection":
        """``ONCEFLOW_S3_ENDPOINT`` (optional: AWS when unset) and the region;
        credentials are left to boto3's chain, which reads ``AWS_*`` itself."""
        return cls(
            endpoint_url=os.environ.get(ENDPOINT_VAR) or None,
            region=os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or None,
        )

    def public(self) -> dict[str, str | None]:
        """What another process needs to rebuild this connection, without secrets."""
        return {"endpoint_url": self.endpoint_url, "region": self.region}

    def __getstate__(self) -> dict:
        # The boto3 session is per process: another process (multiprocessing, Spark) makes its own.
        return {k: v for k, v in self.__dict__.items() if k != "session"}

    @cached_property
    def session(self):
        import boto3

        return boto3.Session(
            aws_access_key_id=self.access_key or None,
            aws_secret_access_key=self.secret_key or None,
            aws_session_token=self.session_token or None,
            region_name=self.region or None,
        )

    def checked(self, what: str) -> "S3Connection":
        """This connection after checking that a region and credentials are
        there, or a ConfigurationError saying, for ``what``, which are not."""
        if not (self.region or self.session.region_name):
            raise ConfigurationError(f"{what} has no AWS region: {REGION_FIX}")
        self.frozen_credentials(what)
        return self

    def frozen_credentials(self, what: str = "S3"):
        credentials = self.session.get_credentials()
        if credentials is None:
            raise ConfigurationError(f"{what} found no AWS credentials: {CREDENTIALS_FIX}")
        return credentials.get_frozen_credentials()

    def client(self, config: Any = None):
        """A boto3 S3 client (``config``: a botocore Config)."""
        return self.session.client("s3", endpoint_url=self.endpoint_url or None, config=config)

    def arrow_filesystem(self):
        """A pyarrow S3FileSystem signed in as the same principal as ``client()``."""
        from pyarrow import fs

        credentials = self.frozen_credentials()
        kwargs: dict[str, Any] = {
            "access_key": credentials.access_key,
            "secret_key": credentials.secret_key,
            "session_token": credentials.token,
            "region": self.region or self.session.region_name,
        }
        if self.endpoint_url:
            parsed = urlparse(self.endpoint_url)
            kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme or "https")
        return fs.S3FileSystem(**{k: v for k, v in kwargs.items() if v is not None})
