"""Figures as PNG files that carry their axes (matplotlib, Agg), and a Markdown + HTML
report over a metrics dict. The curves themselves: prmkit.evaluation.plots."""

from __future__ import annotations

import html
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson

from prmkit.data.io import atomic_write

AXES_KEY = "prmkit:axes"  # PNG text: the axes of the figure, as JSON (read_axes)


def _ticks(axis, lim) -> list[dict]:
    lo, hi = sorted(lim)
    pad = 1e-9 * max(abs(lo), abs(hi), 1.0)
    labels = [t.get_text() for t in axis.get_majorticklabels()]
    return [{"value": float(v), "label": s}
            for v, s in zip(axis.get_majorticklocs(), labels) if lo - pad <= v <= hi + pad]


def describe_axes(fig) -> list[dict]:
    """What a reader of each panel sees: title, axis labels, scales, limits, the ticks
    within the limits (value and label), legend entries, texts and the styles of the
    labelled lines."""
    fig.canvas.draw()
    out = []
    for ax in fig.axes:
        legend = ax.get_legend()
        out.append({
            "title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
            "xlim": [float(v) for v in ax.get_xlim()], "ylim": [float(v) for v in ax.get_ylim()],
            "xticks": _ticks(ax.xaxis, ax.get_xlim()), "yticks": _ticks(ax.yaxis, ax.get_ylim()),
            "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
            "texts": [t.get_text() for t in ax.texts],
            "lines": [{"label": ln.get_label(), "marker": str(ln.get_marker()),
                       "markersize": float(ln.get_markersize()),
                       "hollow": str(ln.get_markerfacecolor()) == "none",
                       "zorder": float(ln.get_zorder()),
                       "x": [float(v) for v in ln.get_xdata()],
                       "y": [float(v) for v in ln.get_ydata()]}
                      for ln in ax.get_lines() if not ln.get_label().startswith("_")],
        })
    return out


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Write a figure as PNG (atomically, parent folders made) with its axes as PNG text
    (`read_axes`), and close it."""
    import matplotlib.pyplot as plt

    axes = json.dumps(describe_axes(fig))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight", metadata={AXES_KEY: axes})
    plt.close(fig)
    with atomic_write(path) as f:
        f.write(buf.getvalue())
    return Path(path)


def read_axes(path: str | os.PathLike) -> list[dict]:
    """The axes a PNG written by `save_figure` shows (see `describe_axes`)."""
    from PIL import Image

    with Image.open(path) as im:
        text = im.text.get(AXES_KEY)
    if text is None:
        raise ValueError(f"{path}: no {AXES_KEY} text (not written by prmkit)")
    return json.loads(text)


def new_figure(nrows: int = 1, ncols: int = 1, figsize=(6.4, 4.2), **kwargs):
    """`plt.subplots` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=figsize, **kwargs)


def _fmt(v) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4f}"
    if v is None:
        return "-"
    return str(v)


def _rows(metrics: Mapping, prefix: str = "") -> list[tuple[str, str]]:
    """Flatten nested metrics into (dotted key, value) rows: mappings (also inside lists,
    as key[i].field) become rows of their own, lists of values are shown inline."""
    rows = []
    for k, v in metrics.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            rows += _rows(v, key + ".")
        elif isinstance(v, list | tuple) and any(isinstance(x, Mapping) for x in v):
            for i, x in enumerate(v):
                rows += _rows(x, f"{key}[{i}].") if isinstance(x, Mapping) else \
                    [(f"{key}[{i}]", _fmt(x))]
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
