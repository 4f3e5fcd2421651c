"""A Spark task of one batch that outlives its batch (argv[1]: the job as JSON).

It passes every check a task makes, then says ``checked`` and waits for a line on stdin: the test
SIGSTOPs it there, as a paused executor is, and resumes it later. Resumed, it does what a task
does, ``init_transactions`` on its split's id and records into its transaction, then what a failed
job's abort does: fence every id of its plan. It says ``fenced`` when done."""

from __future__ import annotations

import json
import sys

from onceflow.sinks.kafka.fencing import fence_transactional_ids
from onceflow.sinks.kafka.writer import TransactionalSplitWriter

job = json.loads(sys.argv[1])
writer = TransactionalSplitWriter(job["config"], job["pipeline"], "out", job["batch_id"], 0, job["topic"],
                                  job["staged_uri"])
print("checked", flush=True)
sys.stdin.readline()
writer.begin()
for i in range(20):
    writer.write(f"zombie-{i}".encode())
writer._producer.flush(30)
fence_transactional_ids(job["config"], job["plan_ids"])
print("fenced", flush=True)
