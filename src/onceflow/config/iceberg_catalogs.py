"""Catalog properties: what a Spark worker may see of them.

A catalog's properties (an Airflow connection's extra, or
``ONCEFLOW_ICEBERG_CATALOGS``) are pyiceberg's: ``type``, ``uri``,
``warehouse``, REST ``credential``/``token``/``header.*``, and the FileIO's
``s3.*``, ``gcs.*``, ``adls.*`` settings. Only an allow-list of them is
public: where the storage is and how to address it. Everything else (keys,
tokens, connection strings, the catalog's own URI, which may carry a
password) is treated as a secret: it never travels as a Spark option, and
each worker adds it back from its own environment, as Kafka secrets are.
"""

from __future__ import annotations

from typing import Mapping

PUBLIC_KEYS = ("type", "warehouse", "py-io-impl")
# FileIO settings that say where storage is and how to address it, e.g. s3.endpoint, s3.region.
PUBLIC_SUFFIXES = (".endpoint", ".region", ".path-style-access", ".force-virtual-addressing",
                   ".connect-timeout", ".request-timeout", ".project-id", ".account-name")


def is_secret_property(key: str) -> bool:
    lowered = key.lower()
    return not (lowered in PUBLIC_KEYS or lowered.endswith(PUBLIC_SUFFIXES))


def public_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` without anything that may be a secret."""
    return {k: v for k, v in properties.items() if not is_secret_property(k)}


def secret_properties(properties: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if is_secret_property(k)}
