"""Small inline SVG bar charts for the pipeline page (no JavaScript library:
the page must render inside Airflow's iframe with nothing to fetch)."""

from __future__ import annotations

from html import escape
from typing import Sequence

COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2")


def stacked_bars(title: str, labels: Sequence[str], series: dict[str, Sequence[float]], unit: str,
                 width: int = 640, height: int = 160) -> str:
    """One bar per label (oldest left), stacked by series; a legend under it."""
    if not labels:
        return f'<p class="muted">{escape(title)}: no batches yet</p>'
    totals = [sum(values[i] for values in series.values()) for i in range(len(labels))]
    top = max(totals) or 1
    slot = width / len(labels)
    bar = max(2.0, slot * 0.7)
    parts = [f'<svg role="img" aria-label="{escape(title)}" width="{width}" height="{height + 20}" class="chart">']
    for i, label in enumerate(labels):
        y = height
        for colour, (name, values) in zip(COLOURS, series.items()):
            h = values[i] / top * height
            if h <= 0:
                continue
            y -= h
            parts.append(
                f'<rect x="{i * slot:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{colour}">'
                f"<title>{escape(label)} {escape(name)}: {values[i]:g} {escape(unit)}</title></rect>"
            )
    parts.append(f'<text x="0" y="{height + 15}" class="axis">max {top:g} {escape(unit)}</text></svg>')
    legend = "".join(
        f'<span class="legend"><i style="background:{c}"></i>{escape(name)}</span>' for c, name in zip(COLOURS, series)
    )
    return f'<figure><figcaption>{escape(title)}</figcaption>{"".join(parts)}<div>{legend}</div></figure>'
