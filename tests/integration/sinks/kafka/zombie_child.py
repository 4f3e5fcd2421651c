"""A Spark task of one batch that outlives its batch (argv[1]: the job as JSON).

It passes every check a task makes, then says ``checked`` and waits for a line on stdin: the test
SIGSTOPs it there, as a paused executor is, and resumes it later. Resumed, it does what a task
does, ``init_transactions`` on its split's id and records into its transaction, then what a failed
job's abort does: fence every id of its plan. It says ``fenced`` when done. With ``"leave_open"``
in the job it instead dies with its transaction open (``written``), as a task killed after its
writes does: the transaction holds its partitions until its timeout or a fence."""

from __future__ import annotations

import json
import os
import sys

from onceflow.sinks.kafka.fencing import fence_transactional_ids
from onceflow.sinks.kafka.writer import TransactionalSplitWriter

job = json.loads(sys.argv[1])
writer = TransactionalSplitWriter(job["config"], job["pipeline"], "out", job["batch_id"], 0, job["topic"],
                                  job["staged_uri"], producer_overrides=job.get("producer_overrides"))
print("checked", flush=True)
sys.stdin.readline()
writer.begin()
for i in range(20):
    writer.write(f"zombie-{i}".encode())
writer._write_rows()  # produce them now, inside its transaction (write() buffers until a chunk or pre-commit)
writer._producer.flush(30)
if job.get("leave_open"):
    print("written", flush=True)
    os._exit(0)  # no abort, no close: the broker keeps the transaction open
fence_transactional_ids(job["config"], job["plan_ids"])
print("fenced", flush=True)
