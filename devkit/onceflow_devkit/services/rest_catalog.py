"""An Iceberg REST catalog: Iceberg's own REST servlet, run from its jars, as a service of the dev kit.

- **Jars**: ``devkit/iceberg-rest/pom.xml`` names Iceberg's test fixtures that hold the server
  (``org.apache.iceberg.rest.RESTCatalogServer``) and what they run on; fetched once
  (``services.jars``).
- **Catalog**: a JDBC catalog in a SQLite file under the service's data directory
  (``CATALOG_URI``), so a restart, SIGKILL included, keeps every table; its tables live under the
  warehouse given at start (``CATALOG_WAREHOUSE``), whose metadata files the server writes
  itself (HadoopFileIO: a local or HDFS warehouse, not S3).
- **Port**: ``CATALOG_REST_PORT``; the server binds every interface (it has no host setting),
  so on a shared machine its catalog is open to the network: docs/iceberg.md says so.
- **Clients**: ``RestCatalog.properties()``, pyiceberg's properties of a REST catalog, what the
  Airflow connection ``onceflow_iceberg`` carries; Spark's ``SparkCatalog`` takes the same uri.

About 2 s to ready on 2 cores and about 85 MB resident.
"""

from __future__ import annotations

import os
import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from onceflow_devkit.services.jars import DEVKIT, INSTALL_HINT, SMALL_JVM, fetch_jars
from onceflow_devkit.services.process import ManagedProcess, ServiceError, pick_port

VERSION = "1.11.0"  # the newest release whose open-api test fixtures are published
POM = DEVKIT / "iceberg-rest" / "pom.xml"
MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
DEFAULT_PORT = 8181  # Iceberg's own default


def fetch(version: str = VERSION) -> Path:
    """The directory of the REST catalog server's jars, fetched by Maven on first use."""
    return fetch_jars(f"iceberg-rest-{version}", POM, {"iceberg.version": version},
                      expect="iceberg-open-api-*-test-fixtures.jar", what=f"Iceberg's REST catalog ({version})",
                      install_hint=INSTALL_HINT)


@dataclass(frozen=True)
class RestCatalog:
    proc: ManagedProcess
    port: int
    warehouse: str

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def properties(self) -> dict[str, str]:
        """pyiceberg's properties of this catalog. The servlet checks no credentials; a catalog that
        does takes ``credential`` (OAuth2 client id:secret) or ``token`` beside these."""
        return {"type": "rest", "uri": self.uri}

    def answers(self) -> bool:
        with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=2) as response:
            return response.status == 200

    def restart(self, kill: bool = False, die_with_parent: bool = False) -> "RestCatalog":
        """The same catalog again, on its port: its clients' uri stays right (SIGKILL first with ``kill``)."""
        self.proc.end(kill, grace=5)
        return start_rest_catalog(self.proc, self.warehouse, die_with_parent=die_with_parent, port=self.port)


def start_rest_catalog(proc: ManagedProcess, warehouse: str, die_with_parent: bool = False,
                       timeout: float = 60, port: int | None = None) -> RestCatalog:
    """Start the REST catalog of ``warehouse`` (``file:///...``) with its SQLite file in ``proc``'s data
    directory (a restart keeps it), on ``port`` or a free one, and wait until it answers."""
    if not warehouse.startswith(("file:/", "hdfs://")):
        raise ServiceError(f"the dev kit's REST catalog writes table metadata with HadoopFileIO and has no S3 "
                           f"client: give it a file:// or hdfs:// warehouse, not {warehouse}")
    libs = fetch()
    if shutil.which("java") is None:
        raise ServiceError(f"the REST catalog needs `java` on PATH: {INSTALL_HINT}")
    proc.data_dir.mkdir(parents=True, exist_ok=True)
    catalog = RestCatalog(proc, port or pick_port(proc.port() or DEFAULT_PORT), warehouse.rstrip("/"))
    env = {
        **_environment_without_catalog_settings(),
        "CATALOG_URI": f"jdbc:sqlite:{proc.data_dir / 'catalog.db'}",
        "CATALOG_WAREHOUSE": catalog.warehouse,
        "CATALOG_REST_PORT": str(catalog.port),
    }
    argv = ["java", "-Xms32m", "-Xmx256m", *SMALL_JVM, "-cp", f"{libs}/*", MAIN_CLASS]
    proc.start(argv, port=catalog.port, ready=catalog.answers, env=env, timeout=timeout,
               die_with_parent=die_with_parent)
    return catalog


def _environment_without_catalog_settings() -> dict[str, str]:
    # The server takes every CATALOG_* variable as a catalog property: none of the caller's may leak in.
    return {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}


if __name__ == "__main__":  # tools/bootstrap.sh: fetch now, so the first test does not
    print(f"onceflow setup: Iceberg REST catalog ({VERSION}) jars in {fetch()}")
