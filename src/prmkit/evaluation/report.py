"""PNG plots (matplotlib, Agg) and a Markdown + HTML report over a metrics dict."""

from __future__ import annotations

import html
import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson

from prmkit.data.io import atomic_write

LABELS = {"best": "best-of-N", "majority": "majority vote", "weighted": "weighted vote",
          "pass": "pass@N"}


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Write a figure as PNG (atomically, parent folders made) and close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    with atomic_write(path) as f:
        f.write(buf.getvalue())
    return Path(path)


def new_figure(nrows: int = 1, ncols: int = 1, figsize=(6.4, 4.2), **kwargs):
    """`plt.subplots` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=figsize, **kwargs)


def plot_bon_curves(
    series: Mapping[str, Mapping[str, list]], path: str | os.PathLike, title: str = "Best-of-N"
) -> Path:
    """series: {label: {"n": [...], "accuracy": [...], "std": [...] (may be empty)}}.

    Accuracy against log2 N, one line per method, +-1 std as a band where given.
    """
    fig, ax = new_figure()
    for label, s in series.items():
        x = [math.log2(n) for n in s["n"]]
        y = [100 * a for a in s["accuracy"]]
        ax.plot(x, y, marker="o", ms=3, label=label)
        std = s.get("std") or []
        if std:
            lo = [a - 100 * d for a, d in zip(y, std)]
            hi = [a + 100 * d for a, d in zip(y, std)]
            ax.fill_between(x, lo, hi, alpha=0.2)
    ax.set_xlabel("log2 N (solutions per problem)")
    ax.set_ylabel("% problems solved")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def plot_calibration(bins: Mapping[str, list], path: str | os.PathLike,
                     title: str = "Step calibration") -> Path:
    """Reliability diagram from `calibration_bins` output."""
    fig, ax = new_figure()
    centers = [(lo + hi) / 2 for lo, hi in zip(bins["lower"], bins["upper"])]
    width = bins["upper"][0] - bins["lower"][0]
    acc = [a if a is not None else 0.0 for a in bins["accuracy"]]
    ax.bar(centers, acc, width=width * 0.9, alpha=0.7, label="accuracy", edgecolor="k")
    conf = [(c, f) for c, f in zip(centers, bins["confidence"]) if f is not None]
    if conf:
        ax.plot([c for c, _ in conf], [f for _, f in conf], "o", color="C3", label="confidence")
    ax.plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted probability that the step is correct")
    ax.set_ylabel("share of steps correct")
    ax.set_title(title)
    ax.legend()
    return save_figure(fig, path)


def _fmt(v) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4f}"
    if v is None:
        return "-"
    return str(v)


def _rows(metrics: Mapping, prefix: str = "") -> list[tuple[str, str]]:
    """Flatten nested metrics into (dotted key, value) rows; lists are shown inline."""
    rows = []
    for k, v in metrics.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            rows += _rows(v, key + ".")
        elif isinstance(v, list | tuple):
            shown = ", ".join(_fmt(x) for x in v[:32]) + (" ..." if len(v) > 32 else "")
            rows.append((key, f"[{shown}]"))
        else:
            rows.append((key, _fmt(v)))
    return rows


def write_report(
    out_dir: str | os.PathLike,
    metrics: Mapping,
    plots: Mapping[str, str | os.PathLike] | None = None,
    title: str = "prmkit evaluation report",
    summary: str | None = None,
    tables: Mapping[str, Mapping[str, Sequence]] | None = None,
) -> dict[str, Path]:
    """Write metrics.json, report.md and report.html into out_dir.

    The report shows, in order: `summary` (a paragraph), `tables` ({caption: {"columns":
    [...], "rows": [[...], ...]}}), the `plots` ({caption: PNG path}; images inside out_dir
    are linked relatively), then every metric. Returns the written paths by kind.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = plots or {}
    tables = tables or {}

    def rel(p) -> str:
        p = Path(p).resolve()
        try:
            return p.relative_to(out.resolve()).as_posix()
        except ValueError:
            return p.as_posix()

    rows = _rows(metrics)
    esc = html.escape
    md = [f"# {title}", ""]
    page = [f"<h1>{esc(title)}</h1>"]
    if summary:
        md += [summary, ""]
        page.append(f"<p>{esc(summary)}</p>")
    for caption, table in tables.items():
        cols, body_rows = list(table["columns"]), [[_fmt(v) for v in r] for r in table["rows"]]
        md += [f"## {caption}", "", "| " + " | ".join(cols) + " |",
               "| " + " | ".join("---" for _ in cols) + " |"]
        md += ["| " + " | ".join(r) + " |" for r in body_rows] + [""]
        head = "".join(f"<th>{esc(c)}</th>" for c in cols)
        trs = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in r) + "</tr>"
                      for r in body_rows)
        page.append(f"<h2>{esc(caption)}</h2><table><tr>{head}</tr>{trs}</table>")
    for caption, p in plots.items():
        md += [f"## {caption}", "", f"![{caption}]({rel(p)})", ""]
        page.append(f"<h2>{esc(caption)}</h2><img src=\"{esc(rel(p))}\" alt=\"{esc(caption)}\">")
    md += ["## All metrics", "", "| metric | value |", "| --- | --- |"]
    md += [f"| {k} | {v.replace('|', '/')} |" for k, v in rows]
    body = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in rows)
    page.append(f"<h2>All metrics</h2><table><tr><th>metric</th><th>value</th></tr>{body}</table>")
    page = (
        "<!doctype html><html><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)}</title><style>body{{font-family:sans-serif;max-width:60em;"
        "margin:2em auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:2px 8px;font-family:monospace}img{max-width:100%}</style></head><body>"
        + "".join(page) + "</body></html>\n"
    )
    paths = {"json": out / "metrics.json", "markdown": out / "report.md",
             "html": out / "report.html"}
    with atomic_write(paths["json"]) as f:
        f.write(orjson.dumps(metrics, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    with atomic_write(paths["markdown"]) as f:
        f.write(("\n".join(md) + "\n").encode())
    with atomic_write(paths["html"]) as f:
        f.write(page.encode())
    return paths
