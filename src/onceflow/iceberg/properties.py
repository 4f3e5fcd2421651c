"""Catalog properties: which are secret, and what a Spark worker may see.

A catalog's properties (an Airflow connection's extra, or
``ONCEFLOW_ICEBERG_CATALOGS``) are pyiceberg's: ``type``, ``uri``,
``warehouse`` and the FileIO's ``s3.*`` settings. Secrets among them (keys,
tokens, a password inside a database URI) never travel as Spark options;
each worker adds them back from its own environment, as Kafka secrets do.
"""

from __future__ import annotations

from typing import Mapping
from urllib.parse import urlparse

from ..kafka.cluster import is_secret

# pyiceberg's REST catalog takes "credential" (client id:secret) and "token"; an access key id
# is half of a key pair, useless (and refused by pyarrow) without its secret.
_SECRET_KEYS = ("credential", "token", "access-key-id")


def is_secret_property(key: str, value: object) -> bool:
    if is_secret(key) or any(k in key.lower() for k in _SECRET_KEYS):
        return True
    return key.lower() == "uri" and isinstance(value, str) and urlparse(value).password is not None


def public_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` without its secrets."""
    return {k: v for k, v in properties.items() if not is_secret_property(k, v)}


def secret_properties(properties: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if is_secret_property(k, v)}
