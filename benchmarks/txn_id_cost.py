"""What a transactional id costs an Apache Kafka broker: heap and ``__transaction_state`` bytes per id.

    python benchmarks/txn_id_cost.py [--ids N] [--steps S] [--threads T] [--json]

onceflow derives an id per (pipeline, sink, place in a pool of ``TXN_ID_POOL`` batches, split)
(``onceflow.sinks.kafka.ids``); the transaction coordinator keeps every id until
``transactional.id.expiration.ms`` (7 days by default) after its last use, so ids per batch
(onceflow 0.4, and Flink's KafkaSink before FLINK-34554) would pile up. This starts a fresh single-node Apache Kafka (the dev kit's), then
opens ``--warm-up`` ids, then in ``S`` steps opens ``N/S`` new ids each, as a batch's split does: ``init_transactions``, one
record in a transaction, commit. After each step it measures

- the broker's live heap: ``jcmd <broker> GC.class_histogram`` (a full GC first, live objects
  only), its total, the coordinator's ``TransactionMetadata`` instances, which must equal the
  ids opened (the proof that the coordinator still holds them all), and the classes that grew;
- ``__transaction_state``'s bytes on disk (every partition's segments, before compaction).

The cost per id is the slope of a least-squares line through the steps, so what the broker
holds before the first id does not count. The broker's heap is the dev kit's (512 MiB max);
an id's cost does not depend on it.

Extrapolated in the report: per 100,000 ids, and for a deployment of ``--pipelines``
pipelines each committing ``--batches-per-minute`` batches with ``--ids-per-batch`` ids
(splits of its Kafka outputs) kept ``--expiration-days`` days, an id per batch, against the
pool's bound: ``TXN_ID_POOL`` ids per split, twice that with every repair id.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import Producer

from onceflow.kafka.admin import ensure_topics
from onceflow.core.plan import TXN_ID_POOL
from onceflow.sinks.kafka.ids import transactional_id
from onceflow_devkit import doc_blocks
from onceflow_devkit.services import apache_kafka
from onceflow_devkit.services.kafka_broker import DEFAULT_BROKER, start_broker
from onceflow_devkit.services.process import ManagedProcess

HISTOGRAM_ROW = re.compile(r"^\s*\d+:\s+(\d+)\s+(\d+)\s+(\S+)", re.MULTILINE)
TOTAL = re.compile(r"^Total\s+(\d+)\s+(\d+)", re.MULTILINE)
METADATA_CLASS = ".TransactionMetadata"


def live_heap(pid: int) -> tuple[int, dict[str, tuple[int, int]]]:
    """Live heap bytes of JVM ``pid`` after a full GC, and its classes: name -> (instances, bytes)."""
    histogram = subprocess.run(["jcmd", str(pid), "GC.class_histogram"], capture_output=True, text=True,
                               check=True, timeout=300).stdout
    total = TOTAL.search(histogram)
    if total is None:
        raise RuntimeError(f"jcmd {pid} GC.class_histogram printed no total: {histogram[-500:]}")
    return int(total.group(2)), {m.group(3): (int(m.group(1)), int(m.group(2))) for m in HISTOGRAM_ROW.finditer(histogram)}


def metadata_instances(classes: dict[str, tuple[int, int]]) -> int:
    return sum(n for name, (n, _b) in classes.items() if name.endswith(METADATA_CLASS))


def grown_classes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], ids: int, top: int) -> list[dict]:
    """The classes whose live bytes grew most from ``before`` to ``after``, per id opened between them."""
    grown = sorted(((after[c][1] - before.get(c, (0, 0))[1], c) for c in after), reverse=True)[:top]
    return [{"class": c, "bytes_per_id": round(b / ids, 1),
             "instances_per_id": round((after[c][0] - before.get(c, (0, 0))[0]) / ids, 2)} for b, c in grown]


def transaction_state_bytes(log_dir: Path) -> int:
    """The segments' bytes (``*.log``): the index files are preallocated, so their size says nothing."""
    return sum(f.stat().st_size for f in log_dir.glob("__transaction_state-*/*.log"))


def open_id(config: dict, topic: str, tid: str) -> None:
    """One id as a batch's split uses it: InitProducerId, one record in a transaction, EndTxn."""
    producer = Producer({**config, "transactional.id": tid, "linger.ms": 0})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, value=b"x", partition=0)
    producer.commit_transaction(60)


def slope(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def run(ids: int, steps: int, threads: int, top: int, warm_up: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="txn-id-cost-") as home:
        proc = ManagedProcess(f"txn-id-cost-{uuid.uuid4().hex[:6]}", Path(home)).reset()
        broker = start_broker(DEFAULT_BROKER, proc, die_with_parent=True)
        try:
            config = broker.config()
            topic = "txn-id-cost"
            ensure_topics(config, [topic], partitions=1)
            # Creates __transaction_state, and fills the broker's request-latency reservoirs (Yammer
            # histograms keep up to 1,028 samples each), which would otherwise grow with the first ids.
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(lambda i: open_id(config, topic, f"warm-up.{i}"), range(warm_up)))
            pid = proc.running_pid()
            log_dir = proc.data_dir / "log"
            rows = []
            heap, first = live_heap(pid)
            rows.append({"ids": 0, "heap_bytes": heap, "metadata_instances": metadata_instances(first),
                         "transaction_state_bytes": transaction_state_bytes(log_dir), "seconds": 0.0})
            per_step = ids // steps
            opened = 0
            with ThreadPoolExecutor(threads) as pool:
                for step in range(steps):
                    started = time.monotonic()
                    names = [transactional_id("bench", "out", 0, batch) for batch in range(opened, opened + per_step)]
                    list(pool.map(lambda tid: open_id(config, topic, tid), names))
                    opened += per_step
                    took = time.monotonic() - started
                    heap, classes = live_heap(pid)
                    rows.append({"ids": opened, "heap_bytes": heap, "metadata_instances": metadata_instances(classes),
                                 "transaction_state_bytes": transaction_state_bytes(log_dir), "seconds": round(took, 1)})
                    print(f"  {opened:>7} ids: live heap {heap / 2**20:7.1f} MiB, {rows[-1]['metadata_instances']} TransactionMetadata, "
                          f"__transaction_state {rows[-1]['transaction_state_bytes'] / 2**20:6.1f} MiB "
                          f"({per_step / took:.0f} ids/s)", file=sys.stderr)
        finally:
            proc.stop(grace=5)
    xs = [r["ids"] for r in rows]
    return {"broker": f"Apache Kafka {apache_kafka.VERSIONS[DEFAULT_BROKER]}, a single node", "rows": rows,
            "heap_bytes_per_id": slope(xs, [r["heap_bytes"] for r in rows]),
            "transaction_state_bytes_per_id": slope(xs, [r["transaction_state_bytes"] for r in rows]),
            "where_the_heap_goes": grown_classes(first, classes, opened, top),
            "coordinator_holds_every_id": all(r["metadata_instances"] >= r["ids"] + warm_up for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", type=int, default=20_000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warm-up", type=int, default=5_000, help="ids opened before the first measurement")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--pipelines", type=int, default=50)
    parser.add_argument("--batches-per-minute", type=float, default=1.0)
    parser.add_argument("--ids-per-batch", type=int, default=8, help="splits of a batch's Kafka outputs (two 4-split outputs: 8)")
    parser.add_argument("--expiration-days", type=float, default=7.0, help="transactional.id.expiration.ms in days")
    parser.add_argument("--classes", type=int, default=8, help="the classes that grew most, reported per id")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--update", metavar="PAGE", help=f"write the figures of {SAVED} into PAGE's {BLOCK} block, run nothing")
    args = parser.parse_args()
    if args.update:
        root = Path(__file__).resolve().parents[1]
        doc_blocks.write(Path(args.update), BLOCK, report(json.loads((root / SAVED).read_text())))
        return
    result = run(args.ids, args.steps, args.threads, args.classes, args.warm_up)
    held = int(args.pipelines * args.batches_per_minute * 60 * 24 * args.expiration_days * args.ids_per_batch)
    result["deployment"] = {"pipelines": args.pipelines, "batches_per_minute": args.batches_per_minute,
                            "ids_per_batch": args.ids_per_batch, "expiration_days": args.expiration_days, "ids_held": held,
                            "heap_bytes": held * result["heap_bytes_per_id"],
                            "transaction_state_bytes": held * result["transaction_state_bytes_per_id"]}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(report(result))


def java_class(name: str) -> str:
    """A histogram's class name as Java spells it in code, without its package: ``[B`` is ``byte[]``."""
    arrays = {"[B": "byte[]", "[I": "int[]", "[J": "long[]", "[C": "char[]"}
    if name in arrays:
        return arrays[name]
    if name.startswith("[L"):
        return java_class(name[2:].rstrip(";")) + "[]"
    return name.rsplit(".", 1)[-1]


def report(result: dict) -> str:
    """The figures docs/scaling.md states, from one run's JSON (``--json``; ``--update`` writes them)."""
    per_id, disk = result["heap_bytes_per_id"], result["transaction_state_bytes_per_id"]
    d = result["deployment"]
    ids = result["rows"][-1]["ids"]
    pooled = d["pipelines"] * TXN_ID_POOL * d["ids_per_batch"] * 2  # each split's pooled id and its repair id
    lines = [
        f"Measured by `python benchmarks/txn_id_cost.py --ids {ids}` on {result['broker']}, "
        f"{'every' if result['coordinator_holds_every_id'] else 'NOT every'} id held by the coordinator:",
        "",
        "| what | per id | per 100,000 ids | "
        f"{d['pipelines']} pipelines, {d['batches_per_minute']:g} batch/min, {d['ids_per_batch']} ids a batch, "
        f"{d['expiration_days']:g} days, an id per batch ({d['ids_held']:,} ids) | the same, pooled (at most {pooled:,} ids) |",
        "|---|---|---|---|---|",
        f"| live heap of the brokers | {per_id:.0f} B | {per_id * 1e5 / 2**20:.0f} MiB | {d['heap_bytes'] / 2**30:.1f} GiB "
        f"| {pooled * per_id / 2**20:.1f} MiB |",
        f"| `__transaction_state` before compaction | {disk:.0f} B | {disk * 1e5 / 2**20:.0f} MiB "
        f"| {d['transaction_state_bytes'] / 2**30:.1f} GiB | {pooled * disk / 2**20:.1f} MiB once compacted |",
        "",
        "Where an id's heap goes (the classes that grew most, per id): "
        + "; ".join(f"`{java_class(g['class'])}` {g['bytes_per_id']:.0f} B" for g in result["where_the_heap_goes"][:6])
        + ".",
    ]
    return "\n".join(lines)


SAVED = "docs/measurements/txn-id-cost.json"
BLOCK = "txn-id-cost"

if __name__ == "__main__":
    main()
