"""Orders and payments for the shop_orders example, as its producers would send them."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class ShopRecord:
    topic: str
    key: bytes
    value: bytes
    malformed: bool


def generate(orders: int, seed: int, coupons: bool, malformed_every: int = 10, start_id: int = 0,
             day_ms: int = 1_795_000_000_000) -> list[ShopRecord]:
    """``orders`` orders over three days, each followed by its payment; every
    ``malformed_every``-th record is broken. With ``coupons``, a third of the orders carry one."""
    rng = random.Random(seed)
    out: list[ShopRecord] = []
    for i in range(start_id, start_id + orders):
        customer = f"customer-{rng.randrange(40)}"
        ts = day_ms + rng.randrange(3 * 86_400_000)
        order = {"order_id": f"o-{i}", "customer_id": customer, "amount": round(rng.uniform(1, 500), 2), "ts": ts}
        if coupons and i % 3 == 0:
            order["coupon"] = rng.choice([" spring-10 ", "welcome5", "Spring10"])
        payment = {"order_id": f"o-{i}", "customer_id": customer, "method": rng.choice(["card", "paypal"]), "ts": ts + 5_000}
        for topic, doc in (("shop_orders", order), ("shop_payments", payment)):
            broken = len(out) % malformed_every == malformed_every - 1
            if broken:
                doc = rng.choice([b"{not json", json.dumps({**doc, "ts": "yesterday"}).encode(),
                                  json.dumps({k: v for k, v in doc.items() if k != "customer_id"}).encode()])
            value = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
            out.append(ShopRecord(topic, customer.encode(), value, broken))
    return out


def produce(config, records: list[ShopRecord]) -> None:
    from confluent_kafka import Producer

    producer = Producer(config)
    for record in records:
        producer.produce(record.topic, record.value, record.key)
    assert producer.flush(30) == 0
