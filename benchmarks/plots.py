"""The PNG plots the benchmark scripts draw for benchmarks/README.md, and how a cost grows.

matplotlib with its file-only backend (Agg): no display needed, the same image on any machine.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)


def growth_shape(xs: Sequence[float], ys: Sequence[float]) -> str:
    """How ``ys`` grows with ``xs`` at the top of the range: the slope of log(y) against log(x) over
    the last step (at the small end a fixed cost hides the growth). Flat below 0.2 (the cost does not
    depend on x), sublinear, linear from 0.8 to 1.2, else worse."""
    if len(xs) < 2:
        return "one point"
    slope = growth_slope(xs[-2:], ys[-2:])
    if slope < 0.2:
        shape = "flat"
    elif slope < 0.8:
        shape = "sublinear"
    elif slope <= 1.2:
        shape = "linear"
    else:
        shape = "worse than linear"
    return f"{shape} ({slope:.2f})"


def growth_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The slope of log(y) against log(x) from the first point to the last."""
    return math.log(max(ys[-1], 1e-9) / max(ys[0], 1e-9)) / math.log(xs[-1] / xs[0])


def draw_stages(path: Path, title: str, rows: Mapping[str, Mapping[str, float]], stages: Sequence[str],
                target_s: float | None = None) -> None:
    """One horizontal bar per row, its stages stacked left to right in seconds; ``target_s`` as a line."""
    fig, ax = plt.subplots(figsize=(10, 1.9 + 0.5 * len(rows)))
    labels = list(rows)
    left = [0.0] * len(labels)
    colours = plt.get_cmap("tab10").colors
    for i, stage in enumerate(stages):
        widths = [rows[label].get(stage, 0.0) for label in labels]
        ax.barh(labels, widths, left=left, color=colours[i % len(colours)], label=stage)
        for y, (x0, w) in enumerate(zip(left, widths)):
            if w >= 0.3:
                ax.text(x0 + w / 2, y, f"{w:.1f}", ha="center", va="center", fontsize=8, color="white")
        left = [a + b for a, b in zip(left, widths)]
    if target_s is not None:
        ax.axvline(target_s, color="black", linestyle="--", linewidth=1, label=f"target {target_s:g} s")
    ax.set_xlabel("seconds")
    ax.set_title(title, fontsize=10)
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_growth(path: Path, panels: Sequence[tuple[str, str, Sequence[float], Mapping[str, Sequence[float]], str]]) -> None:
    """Side-by-side log-log panels, each (title, x label, xs, {series: ys}, y label)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.0), squeeze=False)
    for ax, (title, xlabel, xs, series, ylabel) in zip(axes[0], panels):
        for name, ys in series.items():
            ax.plot(xs, ys, marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([f"{x:,.0f}" for x in xs], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", linewidth=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
