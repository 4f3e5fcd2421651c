"""The one S3 create-if-absent, as the ledger and the file sink both use it
(pure retry logic: botocore's Stubber answers, since no S3 server here returns 409)."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from onceflow.storage.s3 import S3Storage
from onceflow.core.ledger.errors import LedgerUnavailable
from onceflow.core.ledger.storage import LedgerStorage
from onceflow.config.s3_connection import CONFLICT_RETRIES, ConditionalWriteConflict, S3Connection, create_if_absent


def client():
    return boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")


def conflict(stub, times: int):
    for _ in range(times):
        stub.add_client_error("put_object", service_error_code="ConditionalRequestConflict", http_status_code=409)


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)


def test_a_conflict_is_retried_until_the_key_exists_or_the_write_wins():
    s3 = client()
    with Stubber(s3) as stub:
        conflict(stub, 2)
        stub.add_client_error("put_object", service_error_code="PreconditionFailed", http_status_code=412)
        assert create_if_absent(s3, "b", "k", b"x") is False
        conflict(stub, 1)
        stub.add_response("put_object", {})
        assert create_if_absent(s3, "b", "k", b"x") is True
        stub.assert_no_pending_responses()


def test_endless_conflicts_fail_loudly():
    s3 = client()
    with Stubber(s3) as stub:
        conflict(stub, CONFLICT_RETRIES)
        with pytest.raises(ConditionalWriteConflict, match="kept conflicting"):
            create_if_absent(s3, "b", "k", b"x")


def test_the_file_sinks_manifest_and_the_ledger_share_it():
    """A 409 on a _SUCCESS manifest is retried as on a ledger record; the ledger names its own error."""
    storage = S3Storage(S3Connection(access_key="k", secret_key="s", region="us-east-1"))
    with Stubber(storage.client) as stub:
        conflict(stub, 1)
        stub.add_response("put_object", {})
        assert storage.create_if_absent("s3://b/sink/batch=0000000001/_SUCCESS", b"{}") is True
    ledger = LedgerStorage(S3Storage(S3Connection(access_key="k", secret_key="s", region="us-east-1")), "s3://b/w")
    with Stubber(ledger.storage.client) as stub:
        conflict(stub, CONFLICT_RETRIES)
        with pytest.raises(LedgerUnavailable, match="kept conflicting"):
            ledger.create("_onceflow/p/batches/0000000001/plan.json", b"{}")
