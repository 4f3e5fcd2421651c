"""One contract, four backends: local directory, Hadoop FileSystem through
Spark's JVM on file:// and on HDFS (a real NameNode), S3 (moto over HTTP)."""

from __future__ import annotations

import threading

import pytest

from onceflow.core.ledger.errors import LedgerUnavailable
from onceflow.core.ledger.storage import LedgerStorage, open_ledger_storage
from onceflow.config.settings import ConfigurationError
from onceflow.storage.hadoop import HadoopStorage
from onceflow.storage.local import LocalStorage
from onceflow.storage.s3 import S3Storage


def test_create_if_absent_never_overwrites(storage: LedgerStorage):
    assert isinstance(storage, LedgerStorage)
    assert storage.read("a/b/decision.json") is None
    assert storage.create("a/b/decision.json", b"first\x00\xff") is True
    assert storage.create("a/b/decision.json", b"second") is False
    assert storage.read("a/b/decision.json") == b"first\x00\xff"


def test_overwrite_replaces_and_creates(storage: LedgerStorage):
    storage.overwrite("p/_head.json", b"1")
    storage.overwrite("p/_head.json", b"22")
    assert storage.read("p/_head.json") == b"22"


def test_list_is_sorted_recursive_and_hides_temp_files(storage: LedgerStorage):
    for key in ("p/batches/0000000002/plan.json", "p/batches/0000000001/plan.json", "p/batches/0000000001/done/x.json", "q/other.json"):
        assert storage.create(key, b"{}")
    storage.overwrite("p/_head.json", b"{}")
    assert storage.list("p/batches") == [
        "p/batches/0000000001/done/x.json",
        "p/batches/0000000001/plan.json",
        "p/batches/0000000002/plan.json",
    ]
    assert storage.list("p/batches/") == storage.list("p/batches")
    assert storage.list("nothing/here") == []


@pytest.mark.parametrize("key", ["../escape.json", "/abs.json", "a//b.json", "a/./b.json", ""])
def test_keys_cannot_escape_the_root(storage: LedgerStorage, key: str):
    with pytest.raises(ValueError, match="invalid ledger key"):
        storage.create(key, b"x")


def test_describe_names_the_full_location(storage: LedgerStorage):
    where = storage.describe("_onceflow/p/batches/0000000001/plan.json")
    assert where.endswith("_onceflow/p/batches/0000000001/plan.json")
    assert len(where) > len("_onceflow/p/batches/0000000001/plan.json")


def test_racing_creates_have_exactly_one_winner(storage: LedgerStorage):
    if isinstance(storage.storage, HadoopStorage) and storage.root.startswith("file:"):
        pytest.skip(reason="Hadoop's file:// FileSystem checks-then-renames: create-if-absent is atomic only on HDFS")
    for round_ in range(5):
        key = f"race/{round_}/decision.json"
        barrier = threading.Barrier(6)
        wins: list[bytes] = []

        def contender(i: int) -> None:
            barrier.wait()
            data = f"writer-{i}".encode()
            if storage.create(key, data):
                wins.append(data)

        threads = [threading.Thread(target=contender, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1
        assert storage.read(key) == wins[0]


def test_s3_endpoint_unreachable_names_endpoint_bucket_and_fix():
    from onceflow_devkit.services.process import pick_port
    from onceflow_devkit.services.s3 import S3Endpoint

    port = pick_port(1)
    storage = LedgerStorage(S3Storage(S3Endpoint(f"http://127.0.0.1:{port}")), "s3://ledger-bucket/root")
    with pytest.raises(LedgerUnavailable) as err:
        storage.read("_onceflow/p/_head.json")
    message = str(err.value)
    assert f"127.0.0.1:{port}" in message and "s3://ledger-bucket/root/_onceflow/p/_head.json" in message
    assert "reachable" in message and "retry" in message


def test_s3_missing_bucket_is_unavailable_not_absent(s3_endpoint):
    storage = LedgerStorage(S3Storage(s3_endpoint), "s3://no-such-bucket-onceflow")
    with pytest.raises(LedgerUnavailable, match="no-such-bucket-onceflow.*NoSuchBucket.*bucket exists"):
        storage.create("k.json", b"{}")


def test_local_root_unusable_names_the_path(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the ledger root should be")
    storage = open_ledger_storage(str(blocker))
    with pytest.raises(LedgerUnavailable, match=str(blocker)):
        storage.create("_onceflow/p/batches/0000000001/plan.json", b"{}")


def test_factory_picks_backend_by_scheme(tmp_path, spark):
    assert isinstance(open_ledger_storage(str(tmp_path)).storage, LocalStorage)
    assert isinstance(open_ledger_storage(tmp_path.as_uri()).storage, LocalStorage)
    with pytest.raises(ConfigurationError, match="no S3 connection was given"):
        open_ledger_storage("s3://bucket/some/prefix")
    # The HDFS client connects lazily: choosing the backend needs no NameNode.
    hadoop = open_ledger_storage("hdfs://127.0.0.1:1/ledger")
    assert isinstance(hadoop.storage, HadoopStorage) and hadoop.describe("k.json") == "hdfs://127.0.0.1:1/ledger/k.json"


def test_an_s3_store_that_ignores_conditional_writes_is_refused_before_any_record(s3_endpoint, s3_bucket):
    """A store that drops If-None-Match would let two deciders both win: refused, naming it and the fix."""
    from onceflow.config.s3_connection import S3Connection
    from onceflow_devkit.chaos.s3_proxy import S3FaultProxy

    honouring = S3Storage(s3_endpoint)
    assert open_ledger_storage(f"s3://{s3_bucket}/honours", honouring).create("k.json", b"{}")  # moto honours them
    with S3FaultProxy(s3_endpoint.endpoint_url, seed=1, drop_headers=frozenset({"if-none-match"})) as proxy:
        ignoring = S3Storage(S3Connection(endpoint_url=proxy.url, access_key=s3_endpoint.access_key,
                                          secret_key=s3_endpoint.secret_key, region=s3_endpoint.region))
        ledger = open_ledger_storage(f"s3://{s3_bucket}/ignores", ignoring)
        assert ledger.read("k.json") is None  # reading needs no check, and writes nothing
        with pytest.raises(ConfigurationError, match=rf"{proxy.url} \(bucket '{s3_bucket}'\) ignores conditional writes"):
            ledger.create("k.json", b"{}")
    assert honouring.list_tree(f"s3://{s3_bucket}/ignores") == []  # the probe cleaned up after itself
