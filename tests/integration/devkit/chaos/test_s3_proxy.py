"""The S3 fault proxy: transparent when quiet, each fault kind as documented, reproducible by seed.

Real moto_server over HTTP behind the proxy, real boto3 and pyarrow clients in
front of it; what landed in moto is always checked directly, not through the proxy.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, HTTPClientError
from pyarrow import fs

from onceflow_devkit.chaos.s3_proxy import S3_FAULT_KINDS, FaultEvent, S3FaultProxy, S3FaultRates
from onceflow_devkit.services.process import pick_port
from onceflow_devkit.services.s3 import S3Endpoint

pytestmark = pytest.mark.chaos

# "max_attempts" counts retries in the legacy mode (boto3's default); "total_max_attempts" counts all.
NO_RETRIES = Config(retries={"total_max_attempts": 1})
MiB = 1 << 20


@pytest.fixture
def proxy(s3_endpoint):
    with S3FaultProxy(s3_endpoint.endpoint_url, seed=7) as running:
        yield running


def through(proxy: S3FaultProxy, s3_endpoint: S3Endpoint, config: Config | None = None):
    """A boto3 client whose endpoint is the proxy."""
    return S3Endpoint(proxy.url, s3_endpoint.access_key, s3_endpoint.secret_key, s3_endpoint.region).client(config)


def pyarrow_through(proxy: S3FaultProxy, s3_endpoint: S3Endpoint) -> fs.S3FileSystem:
    return fs.S3FileSystem(
        endpoint_override=proxy.url.removeprefix("http://"), scheme="http",
        access_key=s3_endpoint.access_key, secret_key=s3_endpoint.secret_key, region=s3_endpoint.region,
    )


def stored(s3_endpoint: S3Endpoint, bucket: str, key: str) -> bytes | None:
    """The object as moto holds it, read around the proxy."""
    try:
        return s3_endpoint.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "NoSuchKey":
            return None
        raise


def payload(size: int, seed: str) -> bytes:
    block = hashlib.sha256(seed.encode()).digest()
    return (block * (size // len(block) + 1))[:size]


# -- configuration --------------------------------------------------------------

def test_rates_are_probabilities_adding_up_to_at_most_one():
    with pytest.raises(ValueError, match="s3_error_500=1.5"):
        S3FaultRates(s3_error_500=1.5)
    with pytest.raises(ValueError, match="add up to 1.200"):
        S3FaultRates(s3_error_500=0.6, s3_reset_after=0.6)
    rates = S3FaultRates(s3_error_500=0.25, s3_slow=0.25)
    assert [rates.pick(d) for d in (0.0, 0.24, 0.25, 0.49, 0.5, 0.99)] == [
        "s3_error_500", "s3_error_500", "s3_slow", "s3_slow", None, None]


def test_wrong_settings_fail_fast_naming_the_setting():
    with pytest.raises(ValueError, match="upstream_url='https://s3.amazonaws.com'.*plain-HTTP"):
        S3FaultProxy("https://s3.amazonaws.com", seed=1)
    with pytest.raises(ValueError, match="slow_s"):
        S3FaultProxy("http://127.0.0.1:9000", seed=1, slow_s=(2.0, 1.0))
    with pytest.raises(TypeError, match="S3FaultRates"):
        S3FaultProxy("http://127.0.0.1:9000", seed=1).rates = {"s3_slow": 0.1}


# -- no faults: transparent ----------------------------------------------------

def test_with_no_faults_boto3_and_pyarrow_work_through_the_proxy(proxy, s3_endpoint, s3_bucket):
    s3 = through(proxy, s3_endpoint, NO_RETRIES)
    s3.put_object(Bucket=s3_bucket, Key="a/small", Body=b"hello")
    assert s3.get_object(Bucket=s3_bucket, Key="a/small")["Body"].read() == b"hello"
    assert s3.head_object(Bucket=s3_bucket, Key="a/small")["ContentLength"] == 5

    s3.put_object(Bucket=s3_bucket, Key="a/marker", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as second:
        s3.put_object(Bucket=s3_bucket, Key="a/marker", Body=b"second", IfNoneMatch="*")
    assert second.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert stored(s3_endpoint, s3_bucket, "a/marker") == b"first"

    s3.copy_object(Bucket=s3_bucket, Key="b/copy", CopySource={"Bucket": s3_bucket, "Key": "a/small"})
    assert stored(s3_endpoint, s3_bucket, "b/copy") == b"hello"

    # boto3 multipart: Content-Length bodies with Expect: 100-continue, parts of 8 + 4 MiB.
    big = payload(12 * MiB, "boto3")
    s3.upload_fileobj(io.BytesIO(big), s3_bucket, "big/boto3")
    assert stored(s3_endpoint, s3_bucket, "big/boto3") == big

    # pyarrow multipart: chunked aws-chunked bodies with checksum trailers; two writers at once.
    arrow = pyarrow_through(proxy, s3_endpoint)
    contents = {f"big/arrow-{i}": payload(12 * MiB + i, f"arrow-{i}") for i in range(2)}

    def write(key: str) -> None:
        with arrow.open_output_stream(f"{s3_bucket}/{key}") as out:
            out.write(contents[key])

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(write, contents))
    for key, data in contents.items():
        assert stored(s3_endpoint, s3_bucket, key) == data
        with arrow.open_input_stream(f"{s3_bucket}/{key}") as src:
            assert src.read() == data

    listed = s3.list_objects_v2(Bucket=s3_bucket)
    assert sorted(o["Key"] for o in listed["Contents"]) == sorted(
        ["a/small", "a/marker", "b/copy", "big/boto3", *contents])
    s3.delete_object(Bucket=s3_bucket, Key="a/small")
    assert stored(s3_endpoint, s3_bucket, "a/small") is None

    counts = proxy.counts()
    assert counts["requests"] > 20 and counts["upstream_errors"] == 0
    assert all(counts[kind] == 0 for kind in S3_FAULT_KINDS) and proxy.events() == []


def test_client_connections_are_kept_alive(proxy):
    conn = http.client.HTTPConnection(proxy.url.removeprefix("http://"), timeout=10)
    try:
        sockets = []
        for _ in range(3):
            conn.request("GET", "/")  # ListBuckets; moto does not check signatures
            response = conn.getresponse()
            assert response.status == 200 and b"ListAllMyBucketsResult" in response.read()
            sockets.append(conn.sock)
        assert sockets[0] is not None and sockets.count(sockets[0]) == 3
    finally:
        conn.close()


# -- each fault alone ------------------------------------------------------------

@pytest.mark.parametrize("kind, status, code", [("s3_error_500", 500, "InternalError"), ("s3_slow_down_503", 503, "SlowDown")])
def test_error_answers_are_s3_errors_and_do_not_reach_s3(s3_endpoint, s3_bucket, kind, status, code):
    with S3FaultProxy(s3_endpoint.endpoint_url, seed=1, rates=S3FaultRates(**{kind: 1.0})) as proxy:
        s3 = through(proxy, s3_endpoint, NO_RETRIES)
        with pytest.raises(ClientError) as failed:
            s3.put_object(Bucket=s3_bucket, Key="k", Body=b"data")
        assert failed.value.response["Error"]["Code"] == code
        assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
        # The error answer left the kept-alive connection usable for the next request.
        proxy.rates = S3FaultRates()
        assert s3.list_objects_v2(Bucket=s3_bucket)["KeyCount"] == 0
        assert proxy.counts()[kind] == 1 and proxy.counts()["requests"] == 2
        assert proxy.events() == [FaultEvent(1, "PUT", f"/{s3_bucket}/k", kind)]
    assert stored(s3_endpoint, s3_bucket, "k") is None


def test_reset_before_breaks_the_connection_and_the_request_never_reaches_s3(s3_endpoint, s3_bucket):
    with S3FaultProxy(s3_endpoint.endpoint_url, seed=1, rates=S3FaultRates(s3_reset_before=1.0)) as proxy:
        with pytest.raises(HTTPClientError, match="Connection was closed|reset"):
            through(proxy, s3_endpoint, NO_RETRIES).put_object(Bucket=s3_bucket, Key="k", Body=payload(6 * MiB, "k"))
        assert proxy.counts()["s3_reset_before"] == 1
    assert stored(s3_endpoint, s3_bucket, "k") is None


def test_reset_after_applies_the_write_but_the_client_only_sees_a_broken_connection(s3_endpoint, s3_bucket):
    """The case conditional writes must survive: the retry of a create-if-absent gets 412."""
    with S3FaultProxy(s3_endpoint.endpoint_url, seed=1, rates=S3FaultRates(s3_reset_after=1.0)) as proxy:
        s3 = through(proxy, s3_endpoint, NO_RETRIES)
        with pytest.raises(HTTPClientError, match="Connection was closed|reset"):
            s3.put_object(Bucket=s3_bucket, Key="decision", Body=b"COMMIT", IfNoneMatch="*")
        assert stored(s3_endpoint, s3_bucket, "decision") == b"COMMIT"
        proxy.rates = S3FaultRates()
        with pytest.raises(ClientError) as retried:
            s3.put_object(Bucket=s3_bucket, Key="decision", Body=b"COMMIT", IfNoneMatch="*")
        assert retried.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
        assert proxy.counts()["s3_reset_after"] == 1


def test_slow_requests_succeed_after_the_seeded_delay(s3_endpoint, s3_bucket):
    with S3FaultProxy(s3_endpoint.endpoint_url, seed=1, rates=S3FaultRates(s3_slow=1.0), slow_s=(0.4, 0.5)) as proxy:
        s3 = through(proxy, s3_endpoint, NO_RETRIES)
        started = time.monotonic()
        s3.put_object(Bucket=s3_bucket, Key="k", Body=b"late")
        assert time.monotonic() - started >= 0.4
        assert proxy.counts()["s3_slow"] == 1
    assert stored(s3_endpoint, s3_bucket, "k") == b"late"


# -- mixed faults ----------------------------------------------------------------

def test_retries_absorb_a_fifth_of_requests_failing_from_concurrent_clients(s3_endpoint, s3_bucket):
    rates = S3FaultRates(**{kind: 0.04 for kind in S3_FAULT_KINDS})
    with S3FaultProxy(s3_endpoint.endpoint_url, seed=3, rates=rates, slow_s=(0.01, 0.05)) as proxy:
        s3 = through(proxy, s3_endpoint, Config(retries={"mode": "standard", "max_attempts": 8}))
        objects = {f"loop/{i:02d}": payload(1000 + i * 997, str(i)) for i in range(50)}

        def put(key: str) -> None:
            s3.put_object(Bucket=s3_bucket, Key=key, Body=objects[key])

        def get(key: str) -> bytes:
            return s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read()

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(put, objects))
            read_back = dict(zip(objects, pool.map(get, objects)))
        counts = proxy.counts()
    assert read_back == objects
    assert all(stored(s3_endpoint, s3_bucket, key) == data for key, data in objects.items())
    failed = sum(counts[kind] for kind in S3_FAULT_KINDS if kind != "s3_slow")
    assert failed > 0 and counts["s3_slow"] > 0
    # Every failed request was retried exactly once more; slow ones were not retried.
    assert counts["requests"] == 100 + failed
    assert counts["upstream_errors"] == 0


def test_pyarrow_retries_absorb_a_fifth_of_requests_failing(s3_endpoint, s3_bucket):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rates = S3FaultRates(**{kind: 0.04 for kind in S3_FAULT_KINDS})
    tables = {f"pq/{i}.parquet": pa.table({"n": range(i, i + 50_000)}) for i in range(6)}
    # pyarrow writes these small files one request at a time, so the seed fixes which requests fail:
    # seed 1 resets a multipart upload's creation (after it took effect), resets another request
    # before it is forwarded, and fails two with 500.
    with S3FaultProxy(s3_endpoint.endpoint_url, seed=1, rates=rates, slow_s=(0.01, 0.05)) as proxy:
        arrow = pyarrow_through(proxy, s3_endpoint)  # pyarrow's default: AWS standard retries, 3 attempts
        for key, table in tables.items():
            pq.write_table(table, f"{s3_bucket}/{key}", filesystem=arrow)
        injected = {event.kind for event in proxy.events()}
    assert {"s3_reset_after", "s3_reset_before", "s3_error_500"} <= injected
    for key, table in tables.items():
        assert pq.read_table(pa.BufferReader(stored(s3_endpoint, s3_bucket, key))).equals(table)


def test_the_same_seed_gives_the_same_faults_for_the_same_requests(s3_endpoint, s3_bucket):
    rates = S3FaultRates(**{kind: 0.1 for kind in S3_FAULT_KINDS})

    def fault_sequence(seed: int) -> list[tuple[int, str]]:
        with S3FaultProxy(s3_endpoint.endpoint_url, seed=seed, rates=rates, slow_s=(0.0, 0.01)) as proxy:
            s3 = through(proxy, s3_endpoint, NO_RETRIES)
            for i in range(40):
                try:
                    s3.head_bucket(Bucket=s3_bucket)
                except (ClientError, HTTPClientError):
                    pass
            assert proxy.counts()["requests"] == 40
            return [(event.request, event.kind) for event in proxy.events()]

    first = fault_sequence(11)
    assert len({kind for _, kind in first}) >= 3
    assert fault_sequence(11) == first
    assert fault_sequence(12) != first


def test_an_unreachable_endpoint_is_a_502_counted_apart_from_injected_faults(s3_endpoint):
    nobody_listens = f"http://127.0.0.1:{pick_port(None)}"
    with S3FaultProxy(nobody_listens, seed=1) as proxy:
        with pytest.raises(ClientError) as failed:
            through(proxy, s3_endpoint, NO_RETRIES).list_buckets()
        assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 502
        assert failed.value.response["Error"]["Code"] == "BadGateway"
        assert proxy.counts()["upstream_errors"] == 1 and proxy.events() == []
