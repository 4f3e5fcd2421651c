"""Pre-commit one split, print its handle as JSON, then wait to be SIGKILLed.

Run by test_sink.py as a separate process: argv[1] is a JSON object with
config, pipeline, sink, batch_id, split, topic, staged_uri, records.
"""

import json
import sys
import time

from onceflow.sinks.kafka.writer import TransactionalSplitWriter


def main() -> None:
    job = json.loads(sys.argv[1])
    writer = TransactionalSplitWriter(
        job["config"], job["pipeline"], job["sink"], job["batch_id"], job["split"], job["topic"], job["staged_uri"]
    )
    writer.begin()
    for i in range(job["records"]):
        writer.write(f"{job['batch_id']}-{job['split']}-{i}".encode(), key=f"k{i}".encode())
    handle = writer.precommit()
    print(json.dumps(handle.to_dict()), flush=True)
    time.sleep(3600)  # the test kills us: the transaction stays open


if __name__ == "__main__":
    main()
