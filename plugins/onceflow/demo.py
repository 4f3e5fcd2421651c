"""``onceflow demo``: what `make demo` runs.

Until the example pipeline lands, the demo starts the embedded stack, does a
round trip through every service and stops the stack again.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from . import settings
from .services.stack import EmbeddedStack
from .smoke import kafka_round_trip, s3_round_trip, spark_parquet_round_trip


def run_demo(broker: str = "noida", keep_running: bool = False) -> int:
    stack = EmbeddedStack(settings.onceflow_home())
    started = time.monotonic()
    already_up = stack.info() is not None
    info = stack.up(broker=broker)
    print(f"[stack] kafka ({info.kafka.name}) on {info.kafka.bootstrap}, S3 on {info.s3.endpoint_url}")
    failures = 0
    try:
        kafka = kafka_round_trip(info.kafka)
        ok = sorted(kafka.read_committed_values) == sorted(kafka.committed_values)
        failures += not ok
        print(
            f"[kafka] topic {kafka.topic}: committed {len(kafka.committed_values)} records in one transaction, "
            f"aborted {len(kafka.aborted_values)} in another; read_committed consumer read "
            f"{len(kafka.read_committed_values)} -> {'OK' if ok else 'MISMATCH'}"
        )
        s3 = s3_round_trip(info.s3)
        ok = s3.read_back == b"first" and s3.second_conditional_put_status == 412
        failures += not ok
        print(
            f"[s3] s3://{s3.bucket}/{s3.key}: create-if-absent wrote it, a second one got HTTP "
            f"{s3.second_conditional_put_status}, read back {s3.read_back!r} -> {'OK' if ok else 'MISMATCH'}"
        )
        from .spark_session import local_spark

        spark = local_spark("onceflow-demo")
        try:
            with tempfile.TemporaryDirectory(prefix="onceflow-demo-") as tmp:
                written, read = spark_parquet_round_trip(spark, Path(tmp) / "out.parquet")
        finally:
            spark.stop()
        failures += written != read
        print(f"[spark] local Spark wrote {written} rows of Parquet; pyarrow read {read} -> {'OK' if written == read else 'MISMATCH'}")
    finally:
        if not (keep_running or already_up):
            stack.down()
            print("[stack] stopped")
    print(f"[demo] {'passed' if not failures else f'{failures} check(s) FAILED'} in {time.monotonic() - started:.1f} s")
    return 1 if failures else 0
