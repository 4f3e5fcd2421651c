"""Modules that left the library, and where they went.

``onceflow`` 0.2 split the dev kit and the examples out of the library; the
sink contract then took the vote hand-off into ``onceflow.sinks``. An import
of an old name fails at once with the new one, instead of a bare
ModuleNotFoundError; the finder is consulted only after every real one.
"""

from __future__ import annotations

import importlib.abc

DEV_KIT = "part of the dev kit: pip install -e devkit from the onceflow repository, not for production"
STORAGE = "the one storage layer (LocalStorage, HadoopStorage, S3Storage)"
MOVED: dict[str, tuple[str, str]] = {
    # old module: (new module, what it is now)
    "onceflow.services": ("onceflow_devkit.services", DEV_KIT),
    "onceflow.local_airflow": ("onceflow_devkit.local_airflow", DEV_KIT),
    "onceflow.chaos": ("onceflow_devkit.chaos", DEV_KIT),
    "onceflow.audit": ("onceflow_devkit.audit", DEV_KIT),
    "onceflow.demo": ("onceflow_devkit.demo", DEV_KIT),
    "onceflow.smoke": ("onceflow_devkit.smoke", DEV_KIT),
    "onceflow.airflow_env": ("onceflow_devkit.airflow_env", DEV_KIT),
    "onceflow.pipelines": ("onceflow_examples", "the example pipelines; onceflow.discovery finds your own"),
    "onceflow.protocol.coordinator": ("onceflow.coordinator", "still in the library"),
    # 0.2: one storage layer for the ledger, the file sinks and the Kafka staged copies
    "onceflow.localfs": ("onceflow.storage.local", STORAGE),
    "onceflow.files.storage": ("onceflow.storage.base", STORAGE),
    "onceflow.files.backends": ("onceflow.storage.backends", STORAGE),
    "onceflow.files.local": ("onceflow.storage.local", STORAGE),
    "onceflow.files.hadoop": ("onceflow.storage.hadoop", STORAGE),
    "onceflow.files.s3": ("onceflow.storage.s3", STORAGE),
    "onceflow.ledger.backends": ("onceflow.ledger.storage", "open_ledger_storage(root, storage) is there"),
    "onceflow.ledger.local": ("onceflow.storage.local", STORAGE + "; wrap it in onceflow.ledger.storage.LedgerStorage"),
    "onceflow.ledger.hadoop": ("onceflow.storage.hadoop", STORAGE + "; wrap it in onceflow.ledger.storage.LedgerStorage"),
    "onceflow.ledger.s3": ("onceflow.storage.s3", STORAGE + "; wrap it in onceflow.ledger.storage.LedgerStorage"),
    # one route for every kind's vote, in the sink contract
    "onceflow.spark.vote_handoff": ("onceflow.sinks.votes", "record_vote; the contract is onceflow.sinks.api"),
    "onceflow.spark.ledger_votes": ("onceflow.sinks.votes", "record_vote_in_ledger"),
}


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        for old, (new, where) in MOVED.items():
            if fullname == old or fullname.startswith(old + "."):
                raise ModuleNotFoundError(
                    f"{fullname} moved: import {new}{fullname[len(old):]}, {where}", name=fullname
                )
        return None
