"""Fixtures of the Kafka tests: a pre-committing child process the test can SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from onceflow.sinks.kafka.handle import TxnHandle

CHILD = Path(__file__).with_name("precommit_child.py")
from tests.support import ROOT


@pytest.fixture
def precommit_in_child():
    """precommit_in_child(config, topic, staged_uri, records, split=0, batch_id=..., pipeline=..., sink=...) -> TxnHandle.

    Runs the writer in another process, reads its handle, then SIGKILLs it."""
    children: list[subprocess.Popen] = []

    def run(config, topic, staged_uri, records, split=0, batch_id="0000000001", pipeline="pipe", sink="out") -> TxnHandle:
        job = dict(config=dict(config), pipeline=pipeline, sink=sink, batch_id=batch_id, split=split,
                   topic=topic, staged_uri=str(staged_uri), records=records)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        child = subprocess.Popen([sys.executable, str(CHILD), json.dumps(job)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env)
        children.append(child)
        line = child.stdout.readline()
        if not line:
            child.kill()
            raise AssertionError(f"pre-commit child failed: {child.stderr.read()}")
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        return TxnHandle.from_dict(json.loads(line))

    yield run
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait(10)
