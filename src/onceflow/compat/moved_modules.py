"""Modules that moved, and where they went.

- ``MOVED``: modules that left the library (0.2 split the dev kit and the
  examples out of it) or were folded into another. An import of an old name
  fails at once naming the new one, instead of a bare ModuleNotFoundError; that
  finder is consulted only after every real one.
- ``RENAMED``: 0.3 laid the library out by layer (config, storage, core, kafka,
  sources, sinks, pipeline, spark, airflow, ops; docs/developing.md). An old
  name still imports, as the very module object of the new one, with a
  DeprecationWarning naming it; that finder goes first, so that a submodule of
  an old package name is never loaded a second time under that name.
- ``SPLIT``: modules that became a package of the same name (0.4: planning is
  one package, ``onceflow.core.planning``). The old module's names still
  import from the package (its ``__getattr__`` is ``split_name``), each with a
  DeprecationWarning naming the module that holds it now.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import warnings

DEV_KIT = "part of the dev kit: pip install -e devkit from the onceflow repository, not for production"
STORAGE = "the one storage layer (LocalStorage, HadoopStorage, S3Storage)"
MOVED: dict[str, tuple[str, str]] = {
    # old module: (new module, what it is now)
    "onceflow.services": ("onceflow_devkit.services", DEV_KIT),
    "onceflow.local_airflow": ("onceflow_devkit.local_airflow", DEV_KIT),
    "onceflow.chaos": ("onceflow_devkit.chaos", DEV_KIT),
    "onceflow.demo": ("onceflow_devkit.demo", DEV_KIT),
    "onceflow.smoke": ("onceflow_devkit.smoke", DEV_KIT),
    "onceflow.airflow_env": ("onceflow_devkit.airflow_env", DEV_KIT),
    "onceflow.pipelines": ("onceflow_examples", "the example pipelines; onceflow.pipeline.discovery finds your own"),
    # 0.2: one storage layer for the ledger, the file sinks and the Kafka staged copies
    "onceflow.localfs": ("onceflow.storage.local", STORAGE),
    "onceflow.files.storage": ("onceflow.storage.base", STORAGE),
    "onceflow.files.backends": ("onceflow.storage.backends", STORAGE),
    "onceflow.files.local": ("onceflow.storage.local", STORAGE),
    "onceflow.files.hadoop": ("onceflow.storage.hadoop", STORAGE),
    "onceflow.files.s3": ("onceflow.storage.s3", STORAGE),
    "onceflow.ledger.backends": ("onceflow.core.ledger.storage", "open_ledger_storage(root, storage) is there"),
    "onceflow.ledger.local": ("onceflow.storage.local", STORAGE + "; wrap it in onceflow.core.ledger.storage.LedgerStorage"),
    "onceflow.ledger.hadoop": ("onceflow.storage.hadoop", STORAGE + "; wrap it in onceflow.core.ledger.storage.LedgerStorage"),
    "onceflow.ledger.s3": ("onceflow.storage.s3", STORAGE + "; wrap it in onceflow.core.ledger.storage.LedgerStorage"),
    # one route for every kind's vote, in the sink contract
    "onceflow.spark.vote_handoff": ("onceflow.sinks.votes", "record_vote; the contract is onceflow.sinks.api"),
    "onceflow.spark.ledger_votes": ("onceflow.sinks.votes", "record_vote_in_ledger"),
}

# 0.3, old module or package: new one. A name under an old package maps by its longest old prefix.
RENAMED: dict[str, str] = {
    "onceflow.settings": "onceflow.config.settings",
    "onceflow.names": "onceflow.config.names",
    "onceflow.layout": "onceflow.config.warehouse_layout",
    "onceflow.s3_connection": "onceflow.config.s3_connection",
    "onceflow.kafka.cluster": "onceflow.config.kafka_cluster",
    "onceflow.kafka.profiles": "onceflow.config.broker_profiles",
    "onceflow.iceberg.properties": "onceflow.config.iceberg_catalogs",
    "onceflow.deployment": "onceflow.config.deployment",
    "onceflow.input_schedule": "onceflow.config.input_schedule",
    "onceflow.protocol": "onceflow.core",
    "onceflow.coordinator": "onceflow.core.coordinator",
    "onceflow.ledger": "onceflow.core.ledger",
    "onceflow.faults": "onceflow.core.faults",
    "onceflow.status": "onceflow.core.batch_view",
    "onceflow.interval_batches": "onceflow.core.planning.interval_planner",
    "onceflow.lag": "onceflow.core.lag",
    "onceflow.kafka.offsets_mirror": "onceflow.sources.kafka.offsets_mirror",
    "onceflow.spark.kafka_source": "onceflow.sources.kafka.data_source",
    "onceflow.files": "onceflow.sinks.files",
    "onceflow.files.sink": "onceflow.sinks.files.participant",
    "onceflow.spark.file_sink": "onceflow.sinks.files.data_source",
    "onceflow.iceberg": "onceflow.sinks.iceberg",
    "onceflow.iceberg.sink": "onceflow.sinks.iceberg.participant",
    "onceflow.spark.iceberg_sink": "onceflow.sinks.iceberg.data_source",
    "onceflow.kafka.sink": "onceflow.sinks.kafka.participant",
    "onceflow.kafka.writer": "onceflow.sinks.kafka.writer",
    "onceflow.kafka.visibility": "onceflow.sinks.kafka.visibility",
    "onceflow.kafka.txn_protocol": "onceflow.sinks.kafka.txn_protocol",
    "onceflow.kafka.fencing": "onceflow.sinks.kafka.fencing",
    "onceflow.kafka.headers": "onceflow.sinks.kafka.headers",
    "onceflow.kafka.partitioners": "onceflow.sinks.kafka.partitioners",
    "onceflow.spark.kafka_sink": "onceflow.sinks.kafka.data_source",
    "onceflow.spark.writer_options": "onceflow.sinks.writer_options",
    "onceflow.spark.committed_parquet": "onceflow.sinks.committed_reader",
    "onceflow.spec": "onceflow.pipeline.spec",
    "onceflow.runtime": "onceflow.pipeline.runtime",
    "onceflow.discovery": "onceflow.pipeline.discovery",
    "onceflow.interventions": "onceflow.pipeline.quarantine",
    "onceflow.spark_session": "onceflow.spark.local_session",
    "onceflow.hooks": "onceflow.airflow.hooks",
    "onceflow.operators": "onceflow.airflow.operators",
    "onceflow.triggers": "onceflow.airflow.triggers",
    "onceflow.ui": "onceflow.airflow.ui",
    "onceflow.dag_factory": "onceflow.airflow.dag_factory",
    "onceflow.assets": "onceflow.airflow.assets",
    "onceflow.metrics": "onceflow.airflow.metrics",
    "onceflow.deployed": "onceflow.airflow.deployed",
    "onceflow.cli": "onceflow.ops.cli",
    "onceflow.audit": "onceflow.ops.audit",
    "onceflow.audit_submit": "onceflow.ops.audit_submit",
    # 0.4: planning is one package
    "onceflow.core.intervals": "onceflow.core.planning.intervals",
    "onceflow.core.interval_planner": "onceflow.core.planning.interval_planner",
    "onceflow.core.interventions": "onceflow.core.planning.interventions",
    "onceflow.core.run_inputs": "onceflow.core.planning.run_inputs",
    # 0.4: the transactional ids beside their only user, the Kafka sink (the prefix the ACLs grant on
    # is onceflow.config.names.transactional_id_prefix)
    "onceflow.kafka.ids": "onceflow.sinks.kafka.ids",
}

# Old module (now a package of its name): {old name: the module that holds it now}.
SPLIT: dict[str, dict[str, str]] = {
    "onceflow.core.planning": {
        **dict.fromkeys(("TopicPartition", "OffsetSource", "check_not_lost"), "onceflow.core.planning.source"),
        **dict.fromkeys(("PlanningError", "OffsetsLostError"), "onceflow.core.errors"),
        **dict.fromkeys(("StartPosition", "PlanConfig", "no_transactional_ids", "with_ids"), "onceflow.core.planning.config"),
        "next_plan": "onceflow.core.planning.offsets",
    },
}


def renamed(fullname: str) -> str | None:
    """The 0.3 name of old module ``fullname`` (longest old prefix), or None."""
    parts = fullname.split(".")
    for end in range(len(parts), 1, -1):
        new = RENAMED.get(".".join(parts[:end]))
        if new:
            return ".".join([new, *parts[end:]])
    return None


def split_name(package: str, name: str):
    """A package's ``__getattr__`` for the names of the module it replaced (``SPLIT``)."""
    new = SPLIT.get(package, {}).get(name)
    if new is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    warnings.warn(f"{package}.{name} is now {new}.{name}: import that; the old name goes in a later release",
                  DeprecationWarning, stacklevel=3)
    return getattr(importlib.import_module(new), name)


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        for old, (new, where) in MOVED.items():
            if fullname == old or fullname.startswith(old + "."):
                raise ModuleNotFoundError(
                    f"{fullname} moved: import {new}{fullname[len(old):]}, {where}", name=fullname
                )
        return None


class _AliasLoader(importlib.abc.Loader):
    """Hands out the module of the new name; the import system then files it under the old name too."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        module = importlib.import_module(self.new)
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self.real_spec  # the import system set the alias's spec over the module's own


class RenamedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith("onceflow.") or any(
                fullname == old or fullname.startswith(old + ".") for old in MOVED):
            return None
        new = renamed(fullname)
        if new is None:
            return None
        warnings.warn(f"{fullname} is now {new}: import that; the old name goes in a later release",
                      DeprecationWarning, stacklevel=2)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))
