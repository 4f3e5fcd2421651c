"""An Iceberg catalog from an Airflow connection (Airflow worker).

The connection's extra is the catalog's pyiceberg properties, passed
unchanged: ``{"type": "sql", "uri": "postgresql+psycopg2://...", "warehouse":
"s3://lake/"}`` or ``{"type": "rest", "uri": "https://catalog", "credential":
"..."}``, plus the FileIO's ``s3.*`` settings. Airflow stores the extra
encrypted and masks its secret-looking values in logs.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from onceflow.config.settings import ConfigurationError, connection_extra

DEFAULT_CONN_ID = "onceflow_iceberg"


def catalog_properties(conn_id: str, extra: dict) -> dict[str, str]:
    """The catalog properties of a connection's ``extra``; ``uri`` (or a catalog ``type``
    that needs none) is required."""
    properties = {k: str(v) for k, v in connection_extra(conn_id, extra).items()}
    if not properties.get("uri") and not properties.get("type"):
        raise ConfigurationError(
            f"Airflow connection {conn_id!r} has no catalog in its extra: set extra to the pyiceberg catalog "
            'properties, e.g. {"type": "sql", "uri": "sqlite:////data/catalog.db", "warehouse": "file:///data/lake"}'
        )
    return properties


class IcebergCatalogHook(BaseHook):
    """Reads an Iceberg catalog connection: type ``onceflow_iceberg`` (extra = catalog properties)."""

    conn_name_attr = "catalog_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "onceflow_iceberg"
    hook_name = "onceflow Iceberg catalog"

    def __init__(self, catalog_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any):
        super().__init__(**kwargs)
        self.catalog_conn_id = catalog_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "login", "password", "port", "host"],
            "relabeling": {"extra": "pyiceberg catalog properties (JSON)"},
            "placeholders": {"extra": '{"type": "rest", "uri": "https://catalog:8181", "warehouse": "lake"}'},
        }

    def properties(self) -> dict[str, str]:
        conn = self.get_connection(self.catalog_conn_id)
        return catalog_properties(self.catalog_conn_id, conn.extra_dejson)
