"""A fresh sink root per test on each kind of storage, behind the same FileSink."""

from __future__ import annotations

import uuid

import pytest

from onceflow.storage import Storage


@pytest.fixture(params=["local", "hadoop", "hdfs", "s3"])
def sink_root(request, tmp_path) -> tuple[str, Storage]:
    """(sink URI, storage). ``hadoop`` is Hadoop's FileSystem API on file://
    through the test SparkContext's JVM, ``hdfs`` the same API on a real NameNode."""
    if request.param == "local":
        from onceflow.storage.local import LocalStorage

        return str(tmp_path / "sink"), LocalStorage()
    if request.param == "hadoop":
        request.getfixturevalue("spark")
        from onceflow.storage.hadoop import HadoopStorage

        return f"file://{tmp_path}/sink", HadoopStorage()
    if request.param == "hdfs":
        return f"{request.getfixturevalue('hdfs_cluster').uri}/warehouse/sink-{uuid.uuid4().hex[:6]}", \
            request.getfixturevalue("hdfs_storage")
    from onceflow.storage.s3 import S3Storage

    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/warehouse/sink-{uuid.uuid4().hex[:6]}", S3Storage(endpoint)
