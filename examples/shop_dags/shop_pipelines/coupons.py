"""Coupon codes as the shop's checkout accepts them. Runs on Spark executors as a
Python UDF, so this module must reach them: the DAG factory ships its package."""

from __future__ import annotations


def normalize_coupon(code: str | None) -> str | None:
    """``" spring-10 "`` -> ``"SPRING10"``; empty or missing -> None."""
    if code is None:
        return None
    cleaned = "".join(ch for ch in code.upper() if ch.isalnum())
    return cleaned or None
