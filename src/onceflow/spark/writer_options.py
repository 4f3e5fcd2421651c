"""The options of onceflow's sink data sources, checked the same way by each:
names case-insensitive (Spark lowercases them), a missing or non-integer one
named in the error."""

from __future__ import annotations

from typing import Mapping


def checked_options(fmt: str, options: Mapping[str, str], required: tuple[str, ...]) -> dict[str, str]:
    """``options`` with lowercase names; a ValueError names every ``required`` one missing."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    missing = [k for k in required if not opts.get(k)]
    if missing:
        raise ValueError(f"{fmt}: missing option(s) {', '.join(missing)}; set them with .option(name, value)")
    return opts


def int_option(fmt: str, opts: Mapping[str, str], key: str) -> int | None:
    """Option ``key`` as an integer (None when absent or empty); a ValueError names it otherwise."""
    if not opts.get(key):
        return None
    try:
        return int(opts[key])
    except ValueError:
        raise ValueError(f"{fmt}: option {key}={opts[key]!r} is not an integer") from None
