"""S3 storage (``s3://bucket/prefix``) against any S3 endpoint.

No rename on S3: promotion is a server-side copy of each staged object (no
bytes through this process); create-if-absent is ``PutObject`` with
``If-None-Match: *`` (``onceflow.config.s3_connection.create_if_absent``). Writes
stream through pyarrow's S3 output stream (multipart), everything else is
boto3.

The connection (endpoint, region, credentials or the default AWS chain) is
an ``onceflow.config.s3_connection.S3Connection``; another process gets its
``s3.*`` options, which never hold a secret (options show up in query plans).
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from functools import cached_property
from typing import BinaryIO, Iterable, Iterator, Mapping
from urllib.parse import urlparse

from onceflow.config.s3_connection import S3Connection, create_if_absent
from onceflow.storage.base import MissingStagedFile, Storage, join

OPTION_KEYS = ("s3.endpoint_url", "s3.region")
# (endpoint, bucket) pairs this process has seen honour If-None-Match.
_CONDITIONAL_WRITES_OK: set[tuple[str | None, str]] = set()
_NOT_FOUND = ("404", "NoSuchKey", "NotFound")


def split_uri(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
        raise ValueError(f"not an S3 URI: {uri!r}; expected s3://bucket/prefix")
    return parsed.netloc, parsed.path.lstrip("/")


def _code(exc) -> str:
    return exc.response.get("Error", {}).get("Code", "")


class S3Storage(Storage):
    kind = "s3"

    def __init__(self, connection: S3Connection):
        self.connection = connection

    def __repr__(self) -> str:
        return f"S3Storage(endpoint_url={self.connection.endpoint_url!r})"

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "S3Storage":
        endpoint_url, region = (options.get(k) or None for k in OPTION_KEYS)
        return cls(S3Connection(endpoint_url=endpoint_url, region=region))

    def options(self) -> dict[str, str]:
        """The ``s3.*`` options that rebuild this storage in another process
        (every key present, empty when unset: AWS's defaults)."""
        return {f"s3.{k}": v or "" for k, v in self.connection.public().items()}

    @cached_property
    def client(self):
        from botocore.config import Config

        return self.connection.client(
            config=Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30)
        )

    @cached_property
    def _arrow_fs(self):
        return self.connection.arrow_filesystem()

    @contextmanager
    def open_write(self, path: str) -> Iterator[BinaryIO]:
        # Every writer names its file with a fresh uuid or task attempt id, so "fails if it exists" holds by construction.
        bucket, key = split_uri(path)
        try:
            with self._arrow_fs.open_output_stream(f"{bucket}/{key}") as out:
                yield out
        except BaseException:
            # Closing the stream completed the upload even so: a failed writer leaves no partial object.
            self.client.delete_object(Bucket=bucket, Key=key)
            raise

    def read_bytes(self, path: str) -> bytes | None:
        bucket, key = split_uri(path)
        try:
            return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self.client.exceptions.ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return None
            raise

    def size(self, path: str) -> int | None:
        bucket, key = split_uri(path)
        try:
            return int(self.client.head_object(Bucket=bucket, Key=key)["ContentLength"])
        except self.client.exceptions.ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return None
            raise

    def _pages(self, path: str, delimiter: bool) -> Iterator[dict]:
        bucket, key = split_uri(path)
        kwargs = {"Bucket": bucket, "Prefix": key.rstrip("/") + "/" if key else ""}
        if delimiter:
            kwargs["Delimiter"] = "/"
        yield from self.client.get_paginator("list_objects_v2").paginate(**kwargs)

    def list_dir(self, path: str) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for page in self._pages(path, delimiter=True):
            for obj in page.get("Contents", ()):
                out[obj["Key"].rsplit("/", 1)[-1]] = int(obj["Size"])
            for prefix in page.get("CommonPrefixes", ()):
                out[prefix["Prefix"].rstrip("/").rsplit("/", 1)[-1]] = None
        return out

    def list_tree(self, path: str) -> list[str]:
        _, key = split_uri(path)
        strip = len(key.rstrip("/") + "/") if key else 0
        return sorted(obj["Key"][strip:] for page in self._pages(path, delimiter=False) for obj in page.get("Contents", ()))

    def create_if_absent(self, path: str, data: bytes) -> bool:
        bucket, key = split_uri(path)
        return create_if_absent(self.client, bucket, key, data)

    def replace(self, path: str, data: bytes) -> None:
        bucket, key = split_uri(path)
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def delete(self, path: str) -> None:
        bucket, key = split_uri(path)
        self.client.delete_object(Bucket=bucket, Key=key)

    def delete_tree(self, path: str) -> bool:
        bucket, _ = split_uri(path)
        found = False
        for page in self._pages(path, delimiter=False):
            keys = [{"Key": obj["Key"]} for obj in page.get("Contents", ())]
            if keys:
                found = True
                self.client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        return found

    def publish(self, staged_dir: str, target_dir: str, names: Iterable[str]) -> None:
        # Only the named objects are copied: orphans of failed task attempts
        # stay in staging and are deleted with it.
        present = self.list_dir(target_dir)
        for name in sorted(set(names) - present.keys()):
            src_bucket, src_key = split_uri(join(staged_dir, name))
            dst_bucket, dst_key = split_uri(join(target_dir, name))
            try:
                # Managed copy: server-side, multipart above 5 GB.
                self.client.copy({"Bucket": src_bucket, "Key": src_key}, dst_bucket, dst_key)
            except self.client.exceptions.ClientError as exc:
                if _code(exc) in _NOT_FOUND:
                    raise MissingStagedFile(f"{name} is neither in {staged_dir} nor in {target_dir}") from None
                raise

    def check_create_if_absent(self, directory: str) -> None:
        """Probe once per process and bucket that the store honours ``If-None-Match: *``:
        an S3-compatible store that ignores it would let two deciders both "win"."""
        bucket, key = split_uri(join(directory, f"_conditional-write-probe-{uuid.uuid4().hex}"))
        checked = (self.connection.endpoint_url, bucket)
        if checked in _CONDITIONAL_WRITES_OK:
            return
        create_if_absent(self.client, bucket, key, b"first")  # False too if a retry of it met its own write
        overwrote = create_if_absent(self.client, bucket, key, b"second")
        self.client.delete_object(Bucket=bucket, Key=key)
        if overwrote:
            from onceflow.config.settings import ConfigurationError

            raise ConfigurationError(
                f"the S3 store at {self.connection.endpoint_url or 'AWS'} (bucket {bucket!r}) ignores conditional writes "
                "(PutObject with If-None-Match: * overwrote an existing object). onceflow's ledger needs them to decide "
                "each batch once: use AWS S3 or a store that supports them (e.g. MinIO since 2024, Ceph RGW since Squid)"
            )
        _CONDITIONAL_WRITES_OK.add(checked)

    def is_transient(self, exc: BaseException) -> bool:
        from botocore.exceptions import ConnectionError as BotoConnectionError

        return isinstance(exc, (BotoConnectionError, ConnectionError))

    def explain(self, exc: BaseException) -> str:
        endpoint = self.connection.endpoint_url or "AWS"
        return (
            f"{exc} (endpoint {endpoint}). Check that the endpoint is reachable, that the bucket exists and that the "
            "credentials may read and write it, then retry the task"
        )
