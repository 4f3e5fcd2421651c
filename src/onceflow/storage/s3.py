"""S3 storage (``s3://bucket/prefix``) against any S3 endpoint.

No rename on S3. A file sink's files are written as multipart uploads to
their final names and left pending (``open_pending``): no reader sees an
upload until it is completed, and the commit completes each with one request,
whatever its size (``complete_pending``); aborting them frees what they hold.
Other staged objects are promoted by a server-side copy. Create-if-absent is
``PutObject`` with ``If-None-Match: *``
(``onceflow.config.s3_connection.create_if_absent``). Other writes stream
through pyarrow's S3 output stream, everything else is boto3.

The connection (endpoint, region, credentials or the default AWS chain) is
an ``onceflow.config.s3_connection.S3Connection``; another process gets its
``s3.*`` options, which never hold a secret (options show up in query plans).
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from functools import cached_property
from typing import Any, BinaryIO, Iterable, Iterator, Mapping
from urllib.parse import urlparse

from onceflow.config.s3_connection import S3Connection, create_if_absent
from onceflow.storage.base import MissingStagedFile, PendingStorage, PendingWrite, join
from onceflow.config.settings import ConfigurationError

OPTION_KEYS = ("s3.endpoint_url", "s3.region")
# (endpoint, bucket) pairs this process has seen honour If-None-Match.
_CONDITIONAL_WRITES_OK: set[tuple[str | None, str]] = set()
_NOT_FOUND = ("404", "NoSuchKey", "NotFound")
_NO_UPLOAD = ("NoSuchUpload", "404")
# A pending upload's parts: S3 wants at least 5 MiB in every part but the last.
PART_BYTES = 8 << 20


def split_uri(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
        raise ValueError(f"not an S3 URI: {uri!r}; expected s3://bucket/prefix")
    return parsed.netloc, parsed.path.lstrip("/")


def _code(exc) -> str:
    return exc.response.get("Error", {}).get("Code", "")


class _PendingUpload(PendingWrite):
    """The parts of one multipart upload, sent as they fill; never completed here."""

    def __init__(self, client, bucket: str, key: str):
        self._client, self._bucket, self._key = client, bucket, key
        self._upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        self._buffer = bytearray()
        self._parts: list[list] = []

    def write(self, data) -> int:
        self._buffer += data
        while len(self._buffer) >= PART_BYTES:
            self._send(bytes(self._buffer[:PART_BYTES]))
            del self._buffer[:PART_BYTES]
        return len(data)

    def flush(self) -> None:
        pass  # parts go when full; the last one at finish()

    def _send(self, body: bytes) -> None:
        number = len(self._parts) + 1
        etag = self._client.upload_part(Bucket=self._bucket, Key=self._key, UploadId=self._upload_id,
                                        PartNumber=number, Body=body)["ETag"]
        self._parts.append([number, etag])

    def finish(self) -> None:
        if self._buffer or not self._parts:
            self._send(bytes(self._buffer))
            self._buffer.clear()
        self.token = {"upload_id": self._upload_id, "parts": self._parts}

    def abort(self) -> None:
        self._client.abort_multipart_upload(Bucket=self._bucket, Key=self._key, UploadId=self._upload_id)


class S3Storage(PendingStorage):
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

    @contextmanager
    def open_pending(self, path: str) -> Iterator[PendingWrite]:
        bucket, key = split_uri(path)
        upload = _PendingUpload(self.client, bucket, key)
        try:
            yield upload
            upload.finish()
        except BaseException:
            upload.abort()
            raise

    def complete_pending(self, path: str, token: Mapping[str, Any]) -> bool:
        bucket, key = split_uri(path)
        parts = [{"PartNumber": int(n), "ETag": etag} for n, etag in token["parts"]]
        try:
            self.client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=token["upload_id"],
                                                  MultipartUpload={"Parts": parts})
            return True
        except self.client.exceptions.ClientError as exc:
            # NoSuchUpload: completed or aborted before (some stores answer 500 for that: ask the upload)
            if _code(exc) not in _NO_UPLOAD and self.pending_alive(path, token):
                raise
        if self.size(path) is None:  # neither pending nor completed: aborted behind the vote's back
            raise MissingStagedFile(f"{path}: its pending upload is gone and the file is not there")
        return False

    def pending_alive(self, path: str, token: Mapping[str, Any]) -> bool:
        bucket, key = split_uri(path)
        try:
            self.client.list_parts(Bucket=bucket, Key=key, UploadId=token["upload_id"], MaxParts=1)
            return True
        except self.client.exceptions.ClientError as exc:
            if _code(exc) in _NO_UPLOAD:
                return False
            raise

    def abort_upload(self, path: str, token: Mapping[str, Any]) -> None:
        bucket, key = split_uri(path)
        try:
            self.client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=token["upload_id"])
        except self.client.exceptions.ClientError as exc:
            if _code(exc) not in _NO_UPLOAD:
                raise

    def _uploads(self, directory: str) -> Iterator[tuple[str, str]]:
        bucket, key = split_uri(directory)
        prefix = key.rstrip("/") + "/" if key else ""
        for page in self.client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix,
                                                                                Delimiter="/"):
            for upload in page.get("Uploads", ()):
                yield upload["Key"], upload["UploadId"]

    def pending_names(self, directory: str) -> Iterator[str]:
        for key, _ in self._uploads(directory):
            yield key.rsplit("/", 1)[-1]

    def abort_pending(self, directory: str, keep: Iterable[str] = ()) -> int:
        bucket, _ = split_uri(directory)
        kept, aborted = set(keep), 0
        for key, upload_id in list(self._uploads(directory)):
            if key.rsplit("/", 1)[-1] not in kept:
                self.abort_upload(f"s3://{bucket}/{key}", {"upload_id": upload_id})
                aborted += 1
        return aborted

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
