"""Accuracy curves for every report: best-of-N, search against compute, calibration.

`plot_curves` draws one or more panels of curves whose y values are shares of problems
solved (fractions in [0, 1]) and always shows them the same way:

- the y axis is in percent (ticks such as 0%, 20%, ...), never fractions, and spans at
  least 10 points, so that all-zero curves do not get a -0.04..0.04 axis;
- an N axis is log2 with a tick at every N drawn, labelled 1, 2, 4, ... (no 0.25 steps),
  and room around a single N;
- a "variant" curve (e.g. the weighted vote of a search) has larger hollow markers under
  the plain ones, so that equal points stay visible, and every curve has its own marker;
  on log axes, equal points of different curves are set slightly apart along x;
- a degenerate plot still says something: single points are labelled with their value,
  and when every point has the same value a note says so.

Every PNG written by `save_figure` carries its axes (labels, tick values and labels,
limits, legend) as PNG text, which `read_axes` returns: the tests check plots this way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from prmkit.evaluation.report import new_figure, read_axes, save_figure

__all__ = ["Curve", "Panel", "plot_bon_curves", "plot_calibration", "plot_curves",
           "plot_search_curves", "read_axes"]

MARKERS = "osD^vP*X"
SOLVED = "% problems solved"


@dataclass
class Curve:
    label: str
    x: Sequence[float]
    y: Sequence[float]  # shares in [0, 1]
    std: Sequence[float] = ()  # +-1 std band, same units as y
    kind: Literal["line", "variant", "reference"] = "line"
    point_labels: Sequence[str] = ()  # drawn beside each point (e.g. "N=4")
    group: str | None = None  # a variant's base curve (shares its dodged positions)
    color: str | None = None  # matplotlib's cycle by default


@dataclass
class Panel:
    curves: list[Curve]
    xlabel: str
    x_axis: Literal["n", "log", "linear"] = "n"
    ylabel: str = SOLVED
    notes: list[str] = field(default_factory=list)


def _percent_limits(values: list[float]) -> tuple[float, float]:
    """The ticked span: at least 10 points inside [0, 100], padded, rounded to 5 points."""
    if not values:
        return 0.0, 100.0
    lo = max(0.0, math.floor((min(values) - 2) / 5) * 5)
    hi = min(100.0, math.ceil((max(values) + 2) / 5) * 5)
    if hi - lo < 10:
        hi = min(100.0, lo + 10)
        lo = hi - 10
    return lo, hi


def _n_ticks(ns: list[float]) -> list[int]:
    ticks = sorted({int(n) for n in ns})
    if len(ticks) > 10:  # keep the powers of two and the largest N
        ticks = sorted({n for n in ticks if n & (n - 1) == 0} | {ticks[-1]})
    return ticks


def _dodged_x(panel: Panel) -> list[list[float]]:
    """x of every curve's points, points shared by several curves (groups) spread by a
    few percent on log axes so that no marker hides another."""
    xs = [[float(v) for v in c.x] for c in panel.curves]
    if panel.x_axis == "linear":
        return xs
    shared: dict[tuple[float, float], list[str]] = {}
    for c, x in zip(panel.curves, xs):
        if c.kind != "reference":
            for xi, yi in zip(x, c.y):
                groups = shared.setdefault((xi, round(float(yi), 9)), [])
                if (c.group or c.label) not in groups:
                    groups.append(c.group or c.label)
    out = []
    for c, x in zip(panel.curves, xs):
        if c.kind == "reference":
            out.append(x)
            continue
        row = []
        for xi, yi in zip(x, c.y):
            groups = shared[(xi, round(float(yi), 9))]
            j = groups.index(c.group or c.label)
            row.append(xi * 2 ** (0.08 * (j - (len(groups) - 1) / 2)) if xi > 0 else xi)
        out.append(row)
    return out


def _style_x(ax, panel: Panel, xs: list[float]) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    positive = [x for x in xs if x > 0]
    if panel.x_axis == "n" and positive:
        ax.set_xscale("log", base=2)
        ticks = _n_ticks(positive)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(min(positive) / 1.5, max(positive) * 1.5)
    elif panel.x_axis == "log" and positive and len(positive) == len(xs):
        from matplotlib.ticker import LogLocator

        ax.set_xscale("log")
        lo, hi = min(positive), max(positive)
        if hi / lo < 4:  # a narrow range: ticks at the values drawn
            ax.xaxis.set_major_locator(FixedLocator(sorted(set(positive))))
        else:
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(lo / 1.5, hi * 1.5)
    elif xs and min(xs) == max(xs):
        ax.set_xlim(xs[0] - 1, xs[0] + 1)
    ax.set_xlabel(panel.xlabel)


def _draw_panel(ax, panel: Panel) -> None:
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    ys: list[float] = []
    xs: list[float] = []
    for i, (c, x) in enumerate(zip(panel.curves, _dodged_x(panel))):
        y = [100 * float(v) for v in c.y]
        xs += list(map(float, c.x))
        ys += y
        marker = MARKERS[i % len(MARKERS)]
        if c.kind == "reference":
            style = {"ls": "--", "marker": marker, "ms": 3, "lw": 1.2, "zorder": 2}
        elif c.kind == "variant":
            style = {"ls": ":", "marker": marker, "ms": 10, "mfc": "none", "mew": 1.5,
                     "zorder": 3}
        else:
            style = {"ls": "-", "marker": marker, "ms": 5, "zorder": 4}
        line, = ax.plot(x, y, label=c.label, color=c.color, **style)
        if len(c.std):
            lo = [a - 100 * d for a, d in zip(y, c.std)]
            hi = [a + 100 * d for a, d in zip(y, c.std)]
            ax.fill_between(x, lo, hi, alpha=0.15, color=line.get_color())
        labels = list(c.point_labels) or ([f"{y[0]:.1f}%"] if len(y) == 1 else [])
        for xi, yi, text in zip(x, y, labels):
            ax.annotate(text, (xi, yi), textcoords="offset points", xytext=(5, 4 + 8 * (i % 3)),
                        fontsize=7, color=line.get_color())
    _style_x(ax, panel, xs)
    lo, hi = _percent_limits(ys)
    ax.set_ylim(lo - 0.03 * (hi - lo), hi + 0.03 * (hi - lo))  # markers at 0% stay whole
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10], integer=True))
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=100, decimals=0))
    ax.set_ylabel(panel.ylabel)
    notes = list(panel.notes)
    if ys and min(ys) == max(ys) and len(ys) > 1:
        notes.append(f"every point is at {ys[0]:.1f}%")
    if notes:
        ax.text(0.5, 0.95, "\n".join(notes), transform=ax.transAxes, ha="center", va="top",
                fontsize=8, bbox={"boxstyle": "round", "fc": "white", "alpha": 0.8})
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def plot_curves(panels: Sequence[Panel], path: str | os.PathLike, title: str = "") -> Path:
    """Panels side by side, sharing the percent y axis; written as PNG with its axes."""
    fig, axes = new_figure(1, len(panels), figsize=(5.6 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        _draw_panel(ax, panel)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_bon_curves(series: Mapping[str, Mapping[str, list]], path: str | os.PathLike,
                    title: str = "Best-of-N") -> Path:
    """series: {label: {"n": [...], "accuracy": [...], "std": [...] (may be empty)}};
    a label with "pass@" is drawn as a reference."""
    curves = [Curve(label, s["n"], s["accuracy"], s.get("std") or (),
                    "reference" if "pass@" in label else "line") for label, s in series.items()]
    return plot_curves([Panel(curves, "N (solutions per problem)")], path, title)


def plot_search_curves(result: dict, path: str | os.PathLike,
                       title: str = "Search: accuracy against compute") -> Path:
    """`prmkit eval search` results: accuracy against generated tokens per problem (points
    labelled with N) and against N; a tree search's weighted vote is a variant of it."""
    methods: dict[str, list[dict]] = {}
    for p in result["points"]:
        methods.setdefault(p["method"], []).append(p)
    by_tokens, by_n = [], []
    for method, pts in methods.items():
        pts = sorted(pts, key=lambda p: p["n"])
        kind = "variant" if method.endswith("(weighted vote)") else "line"
        y = [p["accuracy"] for p in pts]
        base = method.removesuffix(" (weighted vote)")
        by_tokens.append(Curve(method, [p["generated_tokens"] for p in pts], y, kind=kind,
                               point_labels=[f"N={p['n']}" for p in pts], group=base))
        by_n.append(Curve(method, [p["n"] for p in pts], y, kind=kind, group=base))
    ref = result.get("references")
    if ref:
        for key, name in (("pass_at_n", "pass@N"), ("majority", "majority vote")):
            by_tokens.append(Curve(name, ref["generated_tokens"], ref[key], kind="reference"))
            by_n.append(Curve(name, ref["n"], ref[key], kind="reference"))
    panels = [Panel(by_tokens, "generated tokens per problem", "log"),
              Panel(by_n, "N (candidates per problem)", "n")]
    return plot_curves(panels, path, f"{title} ({result['problems']} problems)")


def plot_calibration(bins: Mapping[str, list], path: str | os.PathLike,
                     title: str = "Step calibration") -> Path:
    """Reliability diagram from `calibration_bins` output; empty bins are not drawn."""
    fig, ax = new_figure()
    width = bins["upper"][0] - bins["lower"][0]
    full = [(lo + width / 2, a) for lo, a in zip(bins["lower"], bins["accuracy"])
            if a is not None]
    ax.bar([c for c, _ in full], [a for _, a in full], width=width * 0.9, alpha=0.7,
           label="share of steps correct", edgecolor="k")
    conf = [(lo + width / 2, f) for lo, f in zip(bins["lower"], bins["confidence"])
            if f is not None]
    if conf:
        ax.plot([c for c, _ in conf], [f for _, f in conf], "o", color="C3",
                label="mean predicted probability")
    ax.plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted probability that the step is correct")
    ax.set_ylabel("share of steps correct")
    ax.set_title(title)
    ax.legend()
    return save_figure(fig, path)

