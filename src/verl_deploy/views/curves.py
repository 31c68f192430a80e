"""Metric curves as PNGs (matplotlib, Agg): every logged `step:N - key:value` metric, grouped by what it measures.

matplotlib is the optional `report` extra and is imported only here, when a report is drawn,
so the CLI starts as fast without it. Attempts, resumes and failures are marked on the step axis
of every plot.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from verl_deploy.views.history import Mark, Series
from verl_deploy.views.safe_text import neutralise

MAX_PER_FIGURE = 12
COLUMNS = 3
# (group id, title, does a key belong to it): the first group that claims a key gets it.
GROUPS: tuple[tuple[str, str, Callable[[str], bool]], ...] = (
    ("validation", "Validation", lambda k: k.startswith(("val-core/", "val-aux/", "val/"))),
    ("reward", "Reward and score", lambda k: k.startswith(("critic/score/", "critic/rewards/", "critic/acc"))
     or re.search(r"(?:^|/)acc(?:/|$)", k) is not None),
    ("lengths", "Response and prompt lengths", lambda k: k.startswith(("response_length/", "prompt_length/",
                                                                       "response/", "prompt/"))),
    ("entropy", "Entropy", lambda k: "entropy" in k),
    ("actor", "Actor losses, clip fractions, KL, gradient", lambda k: k.startswith("actor/")),
    ("timing", "Timing and throughput", lambda k: k.startswith(("timing_s/", "timing_per_token_ms/", "perf/"))),
    ("other", "Other metrics", lambda k: True),
)
ORDER = ("reward", "lengths", "actor", "entropy", "timing", "validation", "other")  # as the report shows them
PLOT_LIMIT = 1e300  # |value| beyond this is not drawn (matplotlib's ticks overflow near float's maximum)
MARK_STYLE = {"attempt": ("#d62728", "--"), "resume": ("#ff7f0e", ":"), "failure": ("#d62728", "-")}


@dataclass
class Figure:
    group: str
    title: str
    keys: list[str]
    path: Path


def grouped(keys: list[str]) -> list[tuple[str, str, list[str]]]:
    groups: dict[str, list[str]] = {}
    for key in sorted(keys):
        group = next(g for g, _, claims in GROUPS if claims(key))
        groups.setdefault(group, []).append(key)
    titles = {g: title for g, title, _ in GROUPS}
    return [(g, titles[g], groups[g]) for g in ORDER if g in groups]


def plottable(value: float) -> bool:
    """Drawn on the curve: finite and within PLOT_LIMIT. The rest is marked at 0 (an x), since an axis
    spanning ±1e308 overflows matplotlib's tick arithmetic and no report would be written at all."""
    return math.isfinite(value) and abs(value) <= PLOT_LIMIT


def _marks_to_draw(marks: list[Mark]) -> list[Mark]:
    return [m for m in marks if m.kind in MARK_STYLE]


def draw(series: Series, marks: list[Mark], out_dir: Path) -> list[Figure]:
    """One PNG per group (several for big groups); returns them in the report's order."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    figures: list[Figure] = []
    drawn_marks = _marks_to_draw(marks)
    for group, title, keys in grouped([k for k, v in series.points.items() if v]):
        for part, start in enumerate(range(0, len(keys), MAX_PER_FIGURE)):
            chunk = keys[start:start + MAX_PER_FIGURE]
            rows = math.ceil(len(chunk) / COLUMNS)
            columns = min(COLUMNS, len(chunk))
            fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 2.6 * rows), squeeze=False)
            for ax, key in zip(axes.flat, chunk):
                points = [(s, v) for s, v in series.points[key] if plottable(v)]
                steps = [s for s, _ in points]
                ax.plot(steps, [v for _, v in points], marker="o" if len(points) < 30 else None, markersize=3,
                        linewidth=1.4, color="#1f77b4")
                bad = [s for s, v in series.points[key] if not plottable(v)]
                if bad:
                    ax.scatter(bad, [0] * len(bad), marker="x", color="#d62728", label="NaN/Inf/out of range",
                               zorder=3)
                for mark in drawn_marks:
                    color, style = MARK_STYLE[mark.kind]
                    ax.axvline(mark.step, color=color, linestyle=style, linewidth=1, alpha=0.8)
                ax.set_title(neutralise(key), fontsize=9)  # a key is log text: matplotlib's warnings quote it
                ax.tick_params(labelsize=7)
                ax.grid(alpha=0.3)
            for ax in list(axes.flat)[len(chunk):]:
                ax.axis("off")
            label = title + (f" ({part + 1})" if len(keys) > MAX_PER_FIGURE else "")
            fig.suptitle(label, fontsize=11)
            # fixed margins: tight_layout measures every text and costs seconds per figure
            fig.subplots_adjust(left=0.07, right=0.98, bottom=0.6 / (2.6 * rows), top=1 - 0.55 / (2.6 * rows),
                                hspace=0.5, wspace=0.28)
            path = out_dir / (f"{group}.png" if part == 0 else f"{group}-{part + 1}.png")
            fig.savefig(path, dpi=90)
            plt.close(fig)
            figures.append(Figure(group, label, chunk, path))
    return figures
