"""HTML pages from Jinja2 templates (autoescaped), with the filters they use."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import cache
from urllib.parse import quote

from onceflow.airflow.ui.health import WARN_FROM, age
from onceflow.core.batch_id import BatchId


def when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if ms else "-"


def duration(ms: float | None) -> str:
    if ms is None:
        return "-"
    seconds = ms / 1000
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


@cache
def _environment():
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("onceflow.airflow.ui", "templates"), autoescape=select_autoescape(["html"]))
    env.filters.update(when=when, duration=duration, age=age, urlpart=lambda s: quote(str(s), safe=""),
                       batch=lambda n: str(BatchId(n)))
    env.globals["warn_from"] = WARN_FROM
    return env


def render(template: str, **context) -> str:
    return _environment().get_template(template).render(**context)
