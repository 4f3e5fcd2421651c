"""Spark Connect mode: which session a job joins, and the URL it joins it by (pure logic)."""

from __future__ import annotations

import pytest

from onceflow.config.settings import ConfigurationError
from onceflow.spark.connect import code_session_id, is_session_closed, job_tag, session_url

CODE = ["/tmp/onceflow-onceflow-0-aaaa.zip", "/tmp/onceflow-shop-0-bbbb.zip"]


def test_jobs_shipping_the_same_code_join_the_same_session_and_new_code_a_new_one():
    assert code_session_id(CODE, 0) == code_session_id(["/elsewhere/onceflow-onceflow-0-aaaa.zip", CODE[1]], 0)
    others = {code_session_id(CODE, 1), code_session_id([CODE[0], "/tmp/onceflow-shop-0-cccc.zip"], 0),
              code_session_id(CODE[:1], 0)}
    assert code_session_id(CODE, 0) not in others and len(others) == 3


def test_the_session_joins_the_connection_url_and_its_parameters():
    assert session_url("sc://h:15002/", "s") == "sc://h:15002/;session_id=s"
    assert session_url("sc://h:15002", "s") == "sc://h:15002/;session_id=s"
    assert session_url("sc://h:15002/;user_id=u;token=t", "s") == "sc://h:15002/;user_id=u;token=t;session_id=s"
    with pytest.raises(ConfigurationError, match="names a session_id: remove it"):
        session_url("sc://h:15002/;session_id=mine", "s")


def test_a_closed_session_is_told_from_other_errors():
    assert is_session_closed(RuntimeError("[INVALID_HANDLE.SESSION_CLOSED] The handle x is invalid."))
    assert not is_session_closed(RuntimeError("[INVALID_HANDLE.SESSION_NOT_FOUND] gone"))
    tags = {job_tag("a,b", 7) for _ in range(2)}
    assert len(tags) == 2 and all(t.startswith("onceflow-a_b-7-") and "," not in t for t in tags)


def test_a_token_sent_to_a_loopback_address_without_tls_is_refused_naming_localhost():
    from onceflow.spark.connect import check_connection_url

    with pytest.raises(ConfigurationError, match="127.0.0.1:15002 has a token, so the client speaks TLS to it .*localhost"):
        check_connection_url("sc://127.0.0.1:15002/;token=t")
    check_connection_url("sc://localhost:15002/;token=t")
    check_connection_url("sc://127.0.0.1:15002/;token=t;use_ssl=true")
    check_connection_url("sc://127.0.0.1:15002")
