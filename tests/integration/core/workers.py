"""Entry points run in separate OS processes by test_processes.py."""

from __future__ import annotations

import sys
import time

from onceflow.core.ledger.storage import LedgerStorage, open_ledger_storage
from onceflow.storage.s3 import S3Storage
from onceflow.core.coordinator import Coordinator
from onceflow.core.errors import BatchAborted
from onceflow.core.states import BatchState

from tests.doubles.fakes import participants


def build_storage(spec):
    kind, *args = spec
    if kind == "local":
        return open_ledger_storage(str(args[0]))
    bucket, prefix, endpoint = args
    return LedgerStorage(S3Storage(endpoint), f"s3://{bucket}/{prefix}")


def race_worker(role: str, storage_spec, effects_root: str, conn, barrier) -> None:
    """Loop: receive (seq, delay), meet the other worker, then commit or roll back."""
    coord = Coordinator(build_storage(storage_spec), "race", participants("dir", effects_root), identity=role)
    while True:
        job = conn.recv()
        if job is None:
            return
        seq, delay = job
        barrier.wait()
        time.sleep(delay)
        try:
            if role == "commit":
                outcome = coord.commit(seq).state.value
            else:
                outcome = coord.rollback(seq, "an upstream task failed").state.value
        except BatchAborted:
            outcome = BatchState.ABORTED.value
        except Exception as exc:  # reported to the test, which fails on it
            outcome = f"error: {exc!r}"
        conn.send(outcome)


if __name__ == "__main__":
    # python -m tests.integration.core.workers <ledger dir> <effects dir> <seq>: the commit task
    # (ONCEFLOW_FAULTS decides where it dies).
    ledger_dir, effects_root, seq = sys.argv[1], sys.argv[2], int(sys.argv[3])
    Coordinator(open_ledger_storage(str(ledger_dir)), "crash", participants("dir", effects_root)).commit(seq)
    print("commit finished")
