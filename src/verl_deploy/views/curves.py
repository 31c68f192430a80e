"""Metric curves as SVG (matplotlib): one plot per logged `step:N - key:value` metric, grouped by what it measures.

matplotlib is the optional `report` extra and is imported only here, when a report is drawn,
so the CLI starts as fast without it. Text stays text in the SVG (`svg.fonttype: none`), so the
page can be searched and its tick labels read back. Every tick label is the full value (no
offset, no truncation: the labels get the room they need), every y axis says what it measures
and in which unit, and attempts, resumes and failures are marked on the step axis in styles
that stay apart when they fall on the same step.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from verl_deploy.views.history import Mark, Series
from verl_deploy.views.safe_text import neutralise
from verl_deploy.views.units import axis_label

# (group id, title, does a key belong to it): the first group that claims a key gets it.
GROUPS: tuple[tuple[str, str, Callable[[str], bool]], ...] = (
    ("validation", "Validation", lambda k: k.startswith(("val-core/", "val-aux/", "val/"))),
    ("reward", "Reward and score", lambda k: k.startswith(("critic/score/", "critic/rewards/", "critic/acc"))
     or re.search(r"(?:^|/)acc(?:/|$)", k) is not None),
    ("lengths", "Response and prompt lengths", lambda k: k.startswith(("response_length/", "prompt_length/",
                                                                       "response/", "prompt/"))),
    ("entropy", "Entropy", lambda k: "entropy" in k),
    ("actor", "Actor losses, clip fractions, KL, gradient", lambda k: k.startswith("actor/")),
    # the async modes: V1 trainer's replay buffer (training/off_policy/...) and fully-async's counters
    ("async", "Off-policy staleness and weight sync", lambda k: k.startswith(("training/off_policy/", "fully_async/", "separate_async/"))
     or k == "timing_s/update_weights"),
    ("timing", "Timing and throughput", lambda k: k.startswith(("timing_s/", "timing_per_token_ms/", "perf/"))),
    ("other", "Other metrics", lambda k: True),
)
ORDER = ("validation", "reward", "lengths", "actor", "entropy", "async", "timing", "other")  # as the report shows them
PLOT_LIMIT = 1e300  # |value| beyond this is not drawn (matplotlib's ticks overflow near float's maximum)
# kind -> (colour, line style, marker, where the marker sits as a fraction of the axis height)
MARK_STYLE = {"attempt": ("#6f42c1", (0, (5, 3)), "D", 0.5),
              "resume": ("#e36209", (0, (1, 2)), "^", 0.04),
              "failure": ("#d73a49", "-", "X", 0.96)}
CURVE = "#1f77b4"
WIDTH_IN, HEIGHT_IN = 4.6, 2.9  # one plot; the page lays them out in a grid as wide as the window
FONT = 8


@dataclass
class Figure:
    group: str
    title: str  # the group's title
    key: str
    path: Path
    svg: str  # the SVG text (the page embeds it)


def grouped(keys: list[str]) -> list[tuple[str, str, list[str]]]:
    groups: dict[str, list[str]] = {}
    for key in sorted(keys, key=lambda k: (not k.startswith("val-core/"), k)):  # verl's core results first
        group = next(g for g, _, claims in GROUPS if claims(key))  # type: ignore[operator]
        groups.setdefault(group, []).append(key)
    titles = {g: title for g, title, _ in GROUPS}
    return [(g, titles[g], groups[g]) for g in ORDER if g in groups]


def plottable(value: float) -> bool:
    """Drawn on the curve: finite and within PLOT_LIMIT. The rest is marked at 0 (an x), since an axis
    spanning ±1e308 overflows matplotlib's tick arithmetic and no report would be written at all."""
    return math.isfinite(value) and abs(value) <= PLOT_LIMIT


def tick_labels(values: list[float]) -> list[str]:
    """Each tick's full value, with as few digits as keep neighbouring ticks apart and every label exact.

    900..1300 reads 900, 1000, ...; 0.28..0.32 reads 0.28, 0.29, ...; 1.5e9 reads 1.5e9. No label
    depends on an offset printed elsewhere, so each one can be read (and checked) on its own.
    """
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return [str(v) for v in values]
    biggest = max(abs(v) for v in finite)
    scientific = biggest >= 1e6 or (0 < biggest < 1e-3)
    for digits in range(0, 12):
        labels = [_label(v, digits, scientific) for v in values]
        exact = all(math.isclose(float(label.replace("−", "-")), v, rel_tol=1e-9, abs_tol=biggest * 1e-12)
                    for label, v in zip(labels, values) if math.isfinite(v))
        if exact and len(set(labels)) == len(labels):
            return labels
    return [_label(v, 12, scientific) for v in values]


def _label(value: float, digits: int, scientific: bool) -> str:
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if scientific:
        mantissa, exponent = f"{value:.{digits}e}".split("e")
        return f"{mantissa}e{int(exponent)}".replace("-", "−")
    return f"{value:.{digits}f}".replace("-", "−")


def _marks_to_draw(marks: list[Mark]) -> list[Mark]:
    return [m for m in marks if m.kind in MARK_STYLE]


def draw(series: Series, marks: list[Mark], out_dir: Path) -> list[Figure]:
    """One SVG per metric, in the report's order (groups, then keys); each also written to out_dir."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import rc_context

    out_dir.mkdir(parents=True, exist_ok=True)
    figures: list[Figure] = []
    drawn_marks = _marks_to_draw(marks)
    for group, title, keys in grouped([k for k, v in series.points.items() if v]):
        for n, key in enumerate(keys):
            name = f"{group}-{n + 1:02d}"
            with rc_context({"svg.fonttype": "none", "svg.hashsalt": name, "font.size": FONT,
                             "axes.formatter.useoffset": False}):
                svg = _one(key, series.points[key], drawn_marks, name)
            path = out_dir / f"{name}.svg"
            path.write_text(svg, encoding="utf-8")
            figures.append(Figure(group, title, key, path, svg))
    return figures


def _one(key: str, points: list[tuple[int, float]], marks: list[Mark], name: str) -> str:
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.ticker import FuncFormatter, MaxNLocator
    from matplotlib.transforms import blended_transform_factory

    fig = MplFigure(figsize=(WIDTH_IN, HEIGHT_IN))
    ax = fig.add_subplot()
    drawn = [(s, v) for s, v in points if plottable(v)]
    bad = [s for s, v in points if not plottable(v)]
    line, = ax.plot([s for s, _ in drawn], [v for _, v in drawn], marker="o" if len(drawn) < 30 else None,
                    markersize=3, linewidth=1.4, color=CURVE)
    line.set_gid(f"{name}-curve")
    if bad:
        ax.scatter(bad, [0] * len(bad), marker="x", color="#d73a49", zorder=3).set_gid(f"{name}-unplottable")
    values = [v for _, v in drawn] + ([0.0] if bad else [])
    if values and max(values) == min(values):  # a flat line: a readable band around it, not ±0.1 % of it
        middle = values[0]
        half = abs(middle) * 0.1 or 1.0
        ax.set_ylim(middle - half, middle + half)
    where = blended_transform_factory(ax.transData, ax.transAxes)
    drawing_order = {"failure": 0, "resume": 1, "attempt": 2}  # the attempt's dashes stay on top of a failure's line
    for i, mark in sorted(enumerate(marks), key=lambda item: drawing_order[item[1].kind]):
        colour, style, marker, height = MARK_STYLE[mark.kind]
        ax.axvline(mark.step, color=colour, linestyle=style, linewidth=1.2, alpha=0.9).set_gid(
            f"{name}-mark-{mark.kind}-{i}")
        ax.plot([mark.step], [height], marker=marker, markersize=6, color=colour, transform=where, clip_on=False,
                linestyle="none", zorder=4)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
    ax.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))
    locator = ax.yaxis.get_major_locator()
    low, high = ax.get_ylim()
    ticks = [t for t in locator.tick_values(low, high) if low - 1e-12 * abs(high - low) <= t <= high + 1e-12 * abs(high - low)]
    labels = dict(zip(ticks, tick_labels(ticks)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: labels.get(v) or tick_labels([v])[0]))
    ax.set_title(neutralise(key), fontsize=FONT + 1)  # a key is log text: matplotlib's warnings quote it
    ax.set_xlabel("training step")
    ax.set_ylabel(axis_label(key))
    ax.grid(alpha=0.3)
    widest = max((len(label) for label in labels.values()), default=3)
    left = (widest * 0.62 * FONT + 3.5 + 4 + FONT * 1.4 + 8) / (WIDTH_IN * 72)  # labels + ticks + the axis label
    fig.subplots_adjust(left=min(0.45, left), right=0.97, bottom=0.16, top=0.89)
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()
