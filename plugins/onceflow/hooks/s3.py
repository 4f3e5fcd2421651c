"""S3 endpoint and credentials from an Airflow ``aws`` connection (Airflow worker)."""

from __future__ import annotations

from ..services.s3 import S3Endpoint

DEFAULT_CONN_ID = "onceflow_s3"


def endpoint_from_connection(login: str | None, password: str | None, extra: dict) -> S3Endpoint:
    extra = dict(extra or {})
    region = extra.get("region_name") or "us-east-1"
    # No endpoint_url means AWS itself.
    endpoint = extra.get("endpoint_url") or f"https://s3.{region}.amazonaws.com"
    return S3Endpoint(endpoint, login or "", password or "", region)


class S3ConnectionHook:
    conn_name_attr = "aws_conn_id"
    default_conn_name = DEFAULT_CONN_ID

    def __init__(self, aws_conn_id: str = DEFAULT_CONN_ID):
        self.aws_conn_id = aws_conn_id

    def endpoint(self) -> S3Endpoint:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(self.aws_conn_id)
        return endpoint_from_connection(conn.login, conn.password, conn.extra_dejson)
