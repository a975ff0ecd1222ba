"""What the experiments' reports share: means over seeds, plots of curves, the report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from prmkit.evaluation.report import write_report


def mean_std(values: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
    arr = np.array(values, dtype=float)
    return arr.mean(0).round(4).tolist(), arr.std(0).round(4).tolist()


def plot_series(series: dict[str, dict], path: Path, xlabel: str, title: str) -> Path:
    """{label: {"x", "mean", "std", optional "ls" and "color"}} (accuracies in 0..1): mean
    with a +-1 std band against a log2 x axis; a dashed or dotted series is a reference."""
    from prmkit.evaluation.plots import Curve, Panel, plot_curves

    curves = [Curve(label, s["x"], s["mean"], s["std"] if np.any(s["std"]) else (),
                    "line" if s.get("ls", "-") == "-" else "reference", color=s.get("color"))
              for label, s in series.items()]
    return plot_curves([Panel(curves, xlabel, ylabel="% of test problems solved")], path, title)


def pct(mean: float, std: float) -> str:
    return f"{100 * mean:.1f} ± {100 * std:.1f}"


def publish(out: Path, summary: dict, plots: dict, tables: dict, tag: str, title: str) -> None:
    """Write an experiment's report and print its statement."""
    write_report(out, summary, plots, title=title, summary=summary["statement"], tables=tables)
    print(f"[{tag}] {summary['statement']}")
    print(f"[{tag}] report: {out / 'report.html'} ({summary['seconds']:.0f} s)")
