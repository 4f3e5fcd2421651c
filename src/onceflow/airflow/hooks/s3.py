"""S3 endpoint and credentials from an Airflow connection (Airflow worker)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from onceflow.config.s3_connection import S3Connection
from onceflow.config.settings import connection_extra

DEFAULT_CONN_ID = "onceflow_s3"


def connection_from_fields(login: str | None, password: str | None, extra: dict,
                           conn_id: str = DEFAULT_CONN_ID) -> S3Connection:
    """An ``S3Connection`` from a connection's fields, in the Amazon provider's
    format: login/password are a static key pair (both empty: the worker's
    default AWS credential chain), extra ``endpoint_url`` (empty: AWS itself),
    ``region_name``, ``aws_session_token``."""
    extra = {k: str(v) for k, v in connection_extra(conn_id, extra).items()}
    return S3Connection(
        endpoint_url=extra.get("endpoint_url") or None,
        access_key=login or None,
        secret_key=password or None,
        region=extra.get("region_name") or None,
        session_token=extra.get("aws_session_token") or None,
    )


class S3ConnectionHook(BaseHook):
    """Reads an S3 connection: type ``onceflow_s3``, or ``aws`` of the Amazon
    provider (the same fields)."""

    conn_name_attr = "aws_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "onceflow_s3"
    hook_name = "onceflow S3"

    def __init__(self, aws_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any):
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "port", "host"],
            "relabeling": {"login": "AWS access key id (empty: default credential chain)", "password": "AWS secret access key"},
            "placeholders": {"extra": '{"region_name": "eu-west-1", "endpoint_url": "https://minio:9000"}'},
        }

    def connection(self, what: str = "the S3 warehouse") -> S3Connection:
        conn = self.get_connection(self.aws_conn_id)
        return connection_from_fields(conn.login, conn.password, conn.extra_dejson, self.aws_conn_id).checked(
            f"{what} (Airflow connection {self.aws_conn_id!r})"
        )
