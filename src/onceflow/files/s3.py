"""S3 storage (``s3://bucket/prefix``) against any S3 endpoint.

No rename on S3: promotion is a server-side copy of each staged object
(no bytes through this process), then the manifest with
``PutObject(If-None-Match: *)``. Writes stream through pyarrow's S3 output
stream (multipart), everything else is boto3.

The connection (endpoint, region, credentials or the default AWS chain) is
an ``onceflow.s3_connection.S3Connection``; another process gets its
``s3.*`` options, which never hold a secret (options show up in query plans).
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cached_property
from typing import BinaryIO, Iterable, Iterator, Mapping
from urllib.parse import urlparse

from ..s3_connection import S3Connection, create_if_absent
from . import layout
from .storage import MissingStagedFile, Storage

OPTION_KEYS = ("s3.endpoint_url", "s3.region")


def split_uri(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
        raise ValueError(f"not an S3 URI: {uri!r}; expected s3://bucket/prefix")
    return parsed.netloc, parsed.path.lstrip("/")


class S3Storage(Storage):
    kind = "s3"

    def __init__(self, connection: S3Connection):
        self.connection = connection

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "S3Storage":
        endpoint_url, region = (options.get(k) or None for k in OPTION_KEYS)
        return cls(S3Connection(endpoint_url=endpoint_url, region=region))

    def options(self) -> dict[str, str]:
        """The ``s3.*`` options that rebuild this storage in another process."""
        return {f"s3.{k}": v for k, v in self.connection.public().items() if v}

    @cached_property
    def client(self):
        return self.connection.client()

    @cached_property
    def _arrow_fs(self):
        return self.connection.arrow_filesystem()

    @contextmanager
    def open_write(self, path: str) -> Iterator[BinaryIO]:
        # Staged names carry a fresh uuid, so "fails if it exists" holds by construction.
        bucket, key = split_uri(path)
        with self._arrow_fs.open_output_stream(f"{bucket}/{key}") as out:
            yield out

    def size(self, path: str) -> int | None:
        bucket, key = split_uri(path)
        try:
            return int(self.client.head_object(Bucket=bucket, Key=key)["ContentLength"])
        except self.client.exceptions.ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def _list(self, path: str, delimiter: bool) -> Iterator[dict]:
        bucket, key = split_uri(path)
        kwargs = {"Bucket": bucket, "Prefix": key.rstrip("/") + "/"}
        if delimiter:
            kwargs["Delimiter"] = "/"
        yield from self.client.get_paginator("list_objects_v2").paginate(**kwargs)

    def list_dir(self, path: str) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for page in self._list(path, delimiter=True):
            for obj in page.get("Contents", ()):
                out[obj["Key"].rsplit("/", 1)[-1]] = int(obj["Size"])
            for prefix in page.get("CommonPrefixes", ()):
                out[prefix["Prefix"].rstrip("/").rsplit("/", 1)[-1]] = None
        return out

    def read_bytes(self, path: str) -> bytes | None:
        bucket, key = split_uri(path)
        try:
            return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None

    def create_if_absent(self, path: str, data: bytes) -> bool:
        bucket, key = split_uri(path)
        return create_if_absent(self.client, bucket, key, data)

    def delete(self, path: str) -> None:
        bucket, key = split_uri(path)
        self.client.delete_object(Bucket=bucket, Key=key)

    def delete_tree(self, path: str) -> bool:
        bucket, _ = split_uri(path)
        found = False
        for page in self._list(path, delimiter=False):
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
            src_bucket, src_key = split_uri(layout.join(staged_dir, name))
            dst_bucket, dst_key = split_uri(layout.join(target_dir, name))
            try:
                # Managed copy: server-side, multipart above 5 GB.
                self.client.copy({"Bucket": src_bucket, "Key": src_key}, dst_bucket, dst_key)
            except self.client.exceptions.ClientError as exc:
                if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                    raise MissingStagedFile(f"{name} is neither in {staged_dir} nor in {target_dir}") from None
                raise

    def is_transient(self, exc: BaseException) -> bool:
        from botocore.exceptions import ConnectionError as BotoConnectionError

        return isinstance(exc, (BotoConnectionError, ConnectionError))
